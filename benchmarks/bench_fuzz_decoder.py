"""A long run of the decode-path fuzzer (testkit/fuzz.py): prints the count of inputs and the rate.

    .venv/bin/python benchmarks/bench_fuzz_decoder.py [--inputs 1000000] [--seed 100] [--chunk 20000]

CI runs the same fuzzer on 2 x 4,000 inputs (tests/nri/test_fuzz_codec.py). Exits 1 on a finding,
printing the input's seed and bytes so it can be replayed with `testkit.fuzz.run`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testkit import fuzz


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--chunk", type=int, default=20_000, help="inputs per seed (one progress line each)")
    args = parser.parse_args()
    total = fuzz.FuzzReport(0, 0, 0, 0, 0.0)
    seed = args.seed
    while total.inputs < args.inputs:
        n = min(args.chunk, args.inputs - total.inputs)
        try:
            r = fuzz.run(n, seed=seed)
        except fuzz.FuzzFinding as finding:
            print(f"FINDING after {total.inputs} inputs: {finding}")
            return 1
        for name in ("inputs", "messages", "requests", "intents"):
            setattr(total, name, getattr(total, name) + getattr(r, name))
        total.seconds += r.seconds
        seed += 1
        print(f"{total.inputs:>9} inputs  {total.messages:>9} ttrpc messages  {total.requests:>9} NRI requests  "
              f"{total.intents:>9} intents  {total.inputs / total.seconds:,.0f} inputs/s", flush=True)
    print(f"fuzz: {total.inputs} inputs (seeds {args.seed}..{seed - 1}), {total.requests} NRI requests parsed, "
          f"{total.intents} intents read, 0 findings, {total.seconds:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
