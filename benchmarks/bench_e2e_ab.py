"""Two checkouts of nri-pinner on one real containerd: does a change cost anything on the node?

The plugin runs from checkout A, then from checkout B, in alternating blocks (A B B A ...) on the same
private containerd (tests/e2e/harness.py; needs root and scripts/install-runtimes.sh), with N shared
(Burstable) containers running; one sample is bench_e2e_pool.py's: a Guaranteed pod's container created,
started, stopped (timeout 0) and removed, and a Burstable create issued --during ms into its create.
Prints per metric both medians and B − A with a 95 % bootstrap interval over blocks. Comparing the two plugins
directly (not each against "no plugin") takes the runtime's own cost out of the difference, so the interval
is narrower than the difference of two bench_e2e_pool.py "added" figures. A checkout is any tree with an
`nri_pinner` package (a `git worktree` of the older commit); both run with this checkout's virtualenv and
the config this checkout's e2e harness writes, so the two must read the same config.

    git worktree add --detach /tmp/before <commit>
    .venv/bin/python benchmarks/bench_e2e_ab.py /tmp/before . [--runtime 1.7|2.1|both] [--shared 30]
        [--samples 200] [--block 5] [--during 5] [--save FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the e2e harness lives in tests/e2e

import bench_e2e_pool as pool  # noqa: E402  (the script's folder is on sys.path)

from tests.e2e.harness import PrivateContainerd  # noqa: E402
from tests.e2e.pinner import start_pinner  # noqa: E402
from tests.e2e.plugins import PluginProcess  # noqa: E402

# `python -m nri_pinner` from the harness's cwd would import this checkout: run the package from the chosen
# one, and fail at start (not measure the wrong tree) when that tree is not what Python imported.
LAUNCH = ("import runpy, sys; sys.path.insert(0, {tree!r}); import nri_pinner; "
          "assert nri_pinner.__file__.startswith({tree!r}), nri_pinner.__file__; "
          "runpy.run_module('nri_pinner', run_name='__main__', alter_sys=True)")


class TwoCheckouts(pool.Bench):
    """bench_e2e_pool's Bench whose conditions are checkouts: "A", "B" or "off"."""

    def __init__(self, runtime: PrivateContainerd, state_dir: Path, during_s: float, trees: dict[str, Path]) -> None:
        super().__init__(runtime, state_dir, during_s)
        self.trees = trees
        self.current = "off"

    def condition(self, name: str) -> None:
        if name == self.current:
            return
        if self.pinner is not None:
            self.pinner.stop()
            self.pinner = None
        self.current = name
        if name == "off":
            return
        tree = str(self.trees[name])
        runtime = self.runtime
        spawn = runtime.start_plugin

        def from_tree(argv: list[str], **kw: Any) -> PluginProcess:
            if argv[1:3] != ["-m", "nri_pinner"]:
                raise RuntimeError(f"the harness no longer launches `python -m nri_pinner`: {argv}")
            return spawn([argv[0], "-c", LAUNCH.format(tree=tree), *argv[3:]], **kw)

        runtime.start_plugin = from_tree  # type: ignore[method-assign]
        try:
            (self.state_dir / "inspect.sock").unlink(missing_ok=True)
            self.pinner = start_pinner(runtime, self.state_dir, test_settings=False,
                                       cpu_manager={"reserved_cpus": "0"})
        finally:
            runtime.start_plugin = spawn  # type: ignore[method-assign]


def compare(key: str, trees: dict[str, Path], shared: int, samples: int, block: int, during_s: float,
            save: Path | None) -> None:
    def make(runtime: PrivateContainerd, state_dir: Path) -> TwoCheckouts:
        return TwoCheckouts(runtime, state_dir, during_s, trees)

    with pool.benched_runtime(key, f"bench-ab-{key}", make) as bench:
        pool.run_shared(bench.runtime, 0, shared)
        began = time.monotonic()
        out = bench.run(samples, block, conditions=tuple(trees))
        print(f"containerd {bench.runtime.version} ({key}), N = {shared} shared containers: {samples} samples per "
              f"checkout in blocks of {block}, {time.monotonic() - began:.0f} s, load average "
              f"{Path('/proc/loadavg').read_text().split()[0]}; A = {trees['A']}, B = {trees['B']}")
        rng = random.Random(46)
        for metric in pool.METRICS:
            a, b = out["A"].values[metric], out["B"].values[metric]
            lo, hi = block_interval(chunks(b, block), chunks(a, block), rng)
            print(f"  {metric:17} A {statistics.median(a) * 1000:7.2f}  B {statistics.median(b) * 1000:7.2f} ms  "
                  f"B - A {(statistics.median(b) - statistics.median(a)) * 1000:+6.2f} [{lo:+.2f} .. {hi:+.2f}] ms")
        if save is not None:
            save.write_text(json.dumps({"runtime": key, "shared": shared, "block": block,
                                        "samples": {name: s.values for name, s in out.items()}}) + "\n")


def chunks(values: list[float], size: int) -> list[list[float]]:
    """A checkout's samples by block (consecutive, one plugin process each)."""
    return [values[i:i + size] for i in range(0, len(values), size)]


def block_interval(b: list[list[float]], a: list[list[float]], rng: random.Random) -> tuple[float, float]:
    """95 % interval (ms) of median(B) - median(A), resampling whole blocks: samples of one plugin process are
    not independent (a restart's first samples, the process's heap), and resampling single samples gave
    intervals that two runs of the same code did not share."""
    diffs = sorted(statistics.median([v for blk in rng.choices(b, k=len(b)) for v in blk])
                   - statistics.median([v for blk in rng.choices(a, k=len(a)) for v in blk])
                   for _ in range(pool.BOOTSTRAP_ROUNDS))
    return diffs[int(0.025 * len(diffs))] * 1000, diffs[int(0.975 * len(diffs)) - 1] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path, help="checkout A (e.g. a worktree of the commit before a change)")
    parser.add_argument("b", type=Path, help="checkout B (e.g. .)")
    pool.sample_args(parser, samples=200, block=5)
    parser.add_argument("--shared", type=int, default=30)
    parser.add_argument("--save", type=Path, help="write each runtime's samples to SAVE.<runtime>.json")
    args = parser.parse_args()
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    for name, tree in trees.items():
        if not (tree / "nri_pinner" / "__main__.py").is_file():
            parser.error(f"checkout {name}: no nri_pinner/__main__.py under {tree}")
    if args.samples < 2 or args.block < 1 or args.shared < 0:
        parser.error("need --samples >= 2, --block >= 1, --shared >= 0")
    for key in ("1.7", "2.1") if args.runtime == "both" else (args.runtime,):
        save = args.save.with_name(f"{args.save.name}.{key}.json") if args.save else None
        compare(key, trees, args.shared, args.samples, args.block, args.during / 1000, save)


if __name__ == "__main__":
    main()
