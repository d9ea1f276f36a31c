"""A Guaranteed container's create→start latency as the number of shared containers grows, with the
systemd calls and systemd's CPU each one costs (issue 45 item 1). Under emulation absolute times say
little, so each figure is also given against N = 0 of the same run: the difference of the medians
(95% bootstrap interval) and their ratio.

For each runtime (a private containerd, tests/e2e/harness.py; needs root and scripts/install-runtimes.sh;
the driver is the e2e harness's, `NRI_PINNER_E2E_CGROUP_DRIVER`) and each N in --shared, ascending
(Burstable and BestEffort containers, one pod in five BestEffort, pods of up to 10, added as N grows),
the --modes rotate in blocks, the plugin restarted for each:
- `per-scope`: the default passes (each changed scope told to systemd, then written);
- `qos-slices`: `reconcile.systemd_pool_on_qos_slices` (cgroup v2 + systemd driver; elsewhere the
  plugin ignores it and the mode equals per-scope).
One sample: a new Guaranteed pod (1 CPU; its sandbox not timed); CRI CreateContainer then StartContainer
of its container, timed end to end; the plugin's systemd calls over that span (the metric
`nri_pinner_cgroup_writes_total{kind="unit_calls"|"unit_failed"}`) and PID 1's CPU time over it
(systemd's own work: meaningful under the systemd driver); then the container and its pod are removed
(untimed). A restart's first pass (every container rewritten once) is waited out before its block.

In the VM tier's guest this runs as part 60-bench-start-latency (long profile; judged by
tests/vm/test_bench_start_latency.py). By hand, on a node with the runtimes installed:

    .venv/bin/python benchmarks/bench_e2e_start_latency.py [--runtime 1.7|2.1|both] [--shared 0 30 100]
        [--samples 12] [--block 3] [--modes per-scope qos-slices] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the e2e harness lives in tests/e2e

from bench_e2e_pool import create_in, interval  # noqa: E402
from bench_e2e_records import free_port  # noqa: E402

from tests.e2e.conftest import e2e_base_dir  # noqa: E402
from tests.e2e.harness import PrivateContainerd, claim_workdir  # noqa: E402
from tests.e2e.pinner import Pinner, start_pinner  # noqa: E402

MODES = ("per-scope", "qos-slices")
CALLS = ('nri_pinner_cgroup_writes_total{kind="unit_calls"}', 'nri_pinner_cgroup_writes_total{kind="unit_failed"}')


def systemd_calls(port: int) -> float:
    """The plugin's systemd calls so far, answered or not."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(CALLS))


def pid1_cpu_seconds() -> float:
    fields = Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class Bench:
    def __init__(self, runtime: PrivateContainerd, state_dir: Path) -> None:
        self.runtime, self.state_dir = runtime, state_dir
        self.pinner: Pinner | None = None
        self.mode: str | None = None
        self.port = free_port()

    def condition(self, mode: str | None) -> None:
        if self.pinner is not None and mode != self.mode:
            self.pinner.stop()
            self.pinner = None
        if mode is not None and self.pinner is None:
            (self.state_dir / "inspect.sock").unlink(missing_ok=True)
            self.pinner = start_pinner(self.runtime, self.state_dir, test_settings=False,
                                       cpu_manager={"reserved_cpus": "0"},
                                       metrics={"enabled": True, "port": self.port},
                                       reconcile={"systemd_pool_on_qos_slices": mode == "qos-slices"})
            self.settled()  # the restart's first pass (every container written once) is no sample's
        self.mode = mode

    def settled(self, still: float = 3.0, limit: float = 600.0) -> float:
        """The call counter once it has not moved for ``still`` seconds (or after ``limit``)."""
        began = time.monotonic()
        while True:
            try:
                value, since = systemd_calls(self.port), time.monotonic()
                break
            except OSError:  # the metrics endpoint is not up yet
                if time.monotonic() - began > limit:
                    raise
                time.sleep(0.2)
        while time.monotonic() - since < still and time.monotonic() - began < limit:
            time.sleep(0.2)
            now = systemd_calls(self.port)
            if now != value:
                value, since = now, time.monotonic()
        return value

    def sample(self) -> dict[str, float]:
        rt = self.runtime
        gpod = rt.run_pod("guaranteed", 1000, 1000, containers=0)
        calls, pid1 = self.settled(), pid1_cpu_seconds()
        began = time.perf_counter()
        cid = create_in(rt, gpod, "c0")
        rt.cri.start_container(cid)
        took = time.perf_counter() - began
        out = {"create_start_ms": took * 1000, "pid1_cpu_ms": (pid1_cpu_seconds() - pid1) * 1000,
               "calls": systemd_calls(self.port) - calls}
        rt.remove_pod(gpod, stop_timeout_s=0)
        return out

    def run(self, modes: list[str], samples: int, block: int) -> dict[str, list[dict[str, float]]]:
        out: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
        order = list(modes)
        while min(len(s) for s in out.values()) < samples:
            for mode in order:
                self.condition(mode)
                for _ in range(min(block, samples - len(out[mode]))):
                    out[mode].append(self.sample())
            order.reverse()  # AB BA AB ...: drift falls on both alike
        return out


def summary(by_n: dict[int, list[dict[str, float]]], rng: random.Random) -> dict[int, dict[str, Any]]:
    """Per N: medians, and the create→start difference from (95% interval) and ratio to N = 0."""
    base_n = min(by_n)
    base = [s["create_start_ms"] for s in by_n[base_n]]
    out = {}
    for n, samples in sorted(by_n.items()):
        lat = [s["create_start_ms"] for s in samples]
        lo, hi = interval([v / 1000 for v in lat], [v / 1000 for v in base], rng)
        out[n] = {"samples": len(lat), "create_start_ms_median": statistics.median(lat),
                  "minus_n0_ms": statistics.median(lat) - statistics.median(base), "minus_n0_interval_ms": [lo, hi],
                  "ratio_to_n0": statistics.median(lat) / statistics.median(base),
                  "calls_median": statistics.median(s["calls"] for s in samples),
                  "calls_max": max(s["calls"] for s in samples),
                  "pid1_cpu_ms_median": statistics.median(s["pid1_cpu_ms"] for s in samples)}
    return out


def bench_runtime(key: str, shared: list[int], modes: list[str], samples: int, block: int) -> dict[str, Any]:
    workdir, lock = claim_workdir(e2e_base_dir() / f"bench-start-{key}")
    runtime = PrivateContainerd(key, workdir)
    state_dir = workdir / "pinner"
    state_dir.mkdir(exist_ok=True)
    bench = Bench(runtime, state_dir)
    rng = random.Random(45)
    raw: dict[str, dict[int, list[dict[str, float]]]] = {m: {} for m in modes}
    running = pods = 0
    try:
        runtime.start()
        print(f"containerd {runtime.version} ({key}): a Guaranteed container's create→start, N shared containers "
              f"running; modes {' / '.join(modes)} rotate in blocks of {block}", flush=True)
        for qos, cpu in (("burstable", (250, 500)), ("besteffort", (0, 0))):
            runtime.run_pod(qos, *cpu, containers=0)  # the QoS slices exist from the start, as a kubelet makes them
        bench.condition(modes[0])
        for _ in range(2):  # warm-up: the first creates unpack the image
            bench.sample()
        for n in sorted(shared):
            while running < n:
                k = min(10, n - running)
                qos, cpu = ("besteffort", (0, 0)) if pods % 5 == 4 else ("burstable", (250, 500))
                runtime.run_pod(qos, *cpu, containers=k)
                running, pods = running + k, pods + 1
            for mode, got in bench.run(modes, samples, block).items():
                raw[mode][n] = got
            print(f"  N = {n}: load average {Path('/proc/loadavg').read_text().split()[0]}", flush=True)
    finally:
        bench.condition(None)
        runtime.stop()
        lock.close()
    result: dict[str, Any] = {"containerd": str(runtime.version), "modes": {}}
    for mode in modes:
        per_n = summary(raw[mode], rng)
        result["modes"][mode] = {str(n): v for n, v in per_n.items()}
        print(f"  {mode}:")
        for n, v in per_n.items():
            lo, hi = v["minus_n0_interval_ms"]
            print(f"    N = {n:3}: create→start {v['create_start_ms_median']:8.1f} ms, minus N=0 "
                  f"{v['minus_n0_ms']:+7.1f} [{lo:+.1f} .. {hi:+.1f}], ratio {v['ratio_to_n0']:.2f}; systemd calls "
                  f"{v['calls_median']:g} (max {v['calls_max']:g}), systemd CPU {v['pid1_cpu_ms_median']:.1f} ms",
                  flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", choices=["1.7", "2.1", "both"], default="both")
    parser.add_argument("--shared", type=int, nargs="+", default=[0, 30, 100])
    parser.add_argument("--samples", type=int, default=12)
    parser.add_argument("--block", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    if args.samples < 2 or args.block < 1 or min(args.shared) < 0 or 0 not in args.shared:
        parser.error("need --samples >= 2, --block >= 1, --shared >= 0 including 0 (the baseline)")
    results = {key: bench_runtime(key, args.shared, args.modes, args.samples, args.block)
               for key in (("1.7", "2.1") if args.runtime == "both" else (args.runtime,))}
    if args.json is not None:
        args.json.write_text(json.dumps({"driver": os.environ.get("NRI_PINNER_E2E_CGROUP_DRIVER", "cgroupfs"),
                                         "shared": sorted(args.shared), "runtimes": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
