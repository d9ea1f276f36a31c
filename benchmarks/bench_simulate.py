"""Time `nri-pinner simulate` on a 10,000-op scenario (creates and removes mixed) on 256 CPUs.

Machine: 2 sockets x 4 NUMA x 16 cores x 2 threads, 2 reserved CPUs, Topology Manager
best-effort. Ops: a random walk that keeps 10-60 containers alive — guaranteed 1/2/4/8/16
CPUs (a third with a GPU hint on a random NUMA node), burstable and best-effort ones,
some pods with an init container; removes pick a random live container.

Prints three figures: the real CLI in a fresh interpreter (`python -m nri_pinner.cli simulate`,
start-up included), `run_scenario_file` in-process (JSON in, JSON lines out), and per-op
median/p99 over the `run_ops` loop. Target: per-op p99 < 1 ms (as one admission on 256 CPUs).

    .venv/bin/python benchmarks/bench_simulate.py [--ops N] [--seed S] [--keep FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from shapes import machine

from nri_pinner.cli.simulate import load_engine, run_ops, run_scenario_file

REPO = Path(__file__).resolve().parent.parent


def scenario(n_ops: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    topology = machine(2, 4, 16, 2)
    live: list[tuple[str, str]] = []
    ops: list[dict[str, Any]] = []
    pod = 0
    while len(ops) < n_ops:
        if live and (len(live) > 60 or (len(live) > 10 and rng.random() < 0.5)):
            p, c = live.pop(rng.randrange(len(live)))
            ops.append({"op": "remove", "pod": p, "container": c})
            continue
        pod += 1
        name = f"pod{pod}"
        kind = rng.random()
        if kind < 0.15:
            ops.append({"op": "create", "pod": name, "container": "c", "qos": "burstable",
                        "cpu_request_milli": 250, "cpu_limit_milli": 1000})
        elif kind < 0.25:
            ops.append({"op": "create", "pod": name, "container": "c", "qos": "besteffort"})
        else:
            milli = rng.choice([1, 2, 4, 8, 16]) * 1000
            create = {"op": "create", "pod": name, "container": "c", "qos": "guaranteed",
                      "cpu_request_milli": milli, "cpu_limit_milli": milli}
            if rng.random() < 0.33:
                create["hints"] = {"vendor.com/gpu": [{"numa": [rng.randrange(8)], "preferred": True}]}
            if rng.random() < 0.1:  # an init container first; the app container reuses its CPUs
                ops.append({**create, "container": "init", "init": True})
                live.append((name, "init"))
            ops.append(create)
        live.append((name, "c"))
    return {"topology": topology.to_json(),
            "config": {"cpu_manager": {"reserved_cpu_count": 2}, "topology_manager": {"policy": "best-effort"}},
            "ops": ops[:n_ops]}


def run(n_ops: int, seed: int, keep: str | None) -> bool:
    data = scenario(n_ops, seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = keep or os.path.join(tmp, "scenario.json")
        Path(path).write_text(json.dumps(data))
        creates = sum(op["op"] == "create" for op in data["ops"])
        print(f"scenario: {n_ops} ops ({creates} creates, {n_ops - creates} removes) on 256 CPUs / 8 NUMA, "
              f"{Path(path).stat().st_size / 1e6:.1f} MB")

        start = time.perf_counter()
        cli = subprocess.run([sys.executable, "-m", "nri_pinner.cli", "simulate", path], cwd=REPO,
                             capture_output=True, text=True, check=False)
        cli_s = time.perf_counter() - start
        if cli.returncode != 0:
            print(cli.stderr, file=sys.stderr)
            return False
        print(f"CLI, fresh interpreter:      {cli_s:8.3f} s total")

        out = io.StringIO()
        start = time.perf_counter()
        rc = run_scenario_file(path, None, out)
        in_process_s = time.perf_counter() - start
        lines = out.getvalue().splitlines()
        assert rc == 0 and lines == cli.stdout.splitlines(), "in-process run differs from the CLI"
        print(f"run_scenario_file:           {in_process_s:8.3f} s total ({in_process_s / n_ops * 1e3:.3f} ms/op)")

    engine = load_engine(data, None)
    samples: list[float] = []
    results = run_ops(engine, data["ops"])
    while True:
        start = time.perf_counter_ns()
        if next(results, None) is None:
            break
        samples.append((time.perf_counter_ns() - start) / 1e6)
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    outcomes: dict[str, int] = {}
    for line in lines:
        doc = json.loads(line)
        key = doc["op"] if doc["op"] == "remove" else doc.get("reason") or (
            "exclusive" if doc["exclusive"] else "shared")
        outcomes[key] = outcomes.get(key, 0) + 1
    print(f"per op (run_ops loop):      median {statistics.median(samples):.3f} ms, p99 {p99:.3f} ms, "
          f"max {samples[-1]:.3f} ms, sum {sum(samples) / 1e3:.3f} s")
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    ok = p99 < 1.0
    print("target met (per-op p99 < 1 ms)" if ok else "TARGET MISSED (per-op p99 < 1 ms)")
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", metavar="FILE", help="write the generated scenario here and keep it")
    args = parser.parse_args()
    sys.exit(0 if run(args.ops, args.seed, args.keep) else 1)
