"""What bringing the runtime's records in line costs (README "Pool changes": the runtime's record), on a
real containerd with N shared containers (private instance, tests/e2e/harness.py; needs root and
scripts/install-runtimes.sh).

1. Convergence: N Burstable containers run; a Guaranteed container takes CPU 1, the pool narrows, every
   shared container's record (containerd's stored spec) is stale. Timed: from the Guaranteed start until
   `nri_pinner_runtime_record_updates{outcome="ok"}` has grown by N, then every record checked through
   CRI ContainerStatus.
2. Event latency: two conditions rotate in blocks — records on (`runtime_record_quiet_seconds` 1 s) and
   off (0). One sample: a Guaranteed pod's create and start (the pool narrows: N records go stale), a
   pause of 1.0–1.4 s (records on: updates are running by then), a Burstable pod's create and start
   (meeting them), the Guaranteed container's stop and remove. Prints medians per condition and the
   added median (on − off) with a 95 % bootstrap interval, and the load average.

    .venv/bin/python benchmarks/bench_e2e_records.py [--runtime 1.7|2.1|both] [--shared 100] [--samples 12]
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the e2e harness lives in tests/e2e

from bench_e2e_pool import create_in, interval  # noqa: E402

from tests.e2e.conftest import e2e_base_dir  # noqa: E402
from tests.e2e.harness import PrivateContainerd, claim_workdir  # noqa: E402
from tests.e2e.pinner import Pinner, start_pinner  # noqa: E402

CONDITIONS = ("records-on", "records-off")
METRICS = ("guaranteed-create", "guaranteed-start", "burstable-create", "burstable-start", "stop", "remove")
COUNTER = 'nri_pinner_runtime_record_updates_total{outcome="ok"}'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def record_updates(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(COUNTER):
            return float(line.split()[-1])
    return 0.0


def recorded(runtime: PrivateContainerd, cid: str) -> str:
    _, info = runtime.cri.container_status(cid)
    return str(info.get("runtimeSpec", {}).get("linux", {}).get("resources", {}).get("cpu", {}).get("cpus", ""))


class Bench:
    def __init__(self, runtime: PrivateContainerd, state_dir: Path, rng: random.Random) -> None:
        self.runtime, self.state_dir, self.rng = runtime, state_dir, rng
        self.pinner: Pinner | None = None
        self.on: bool | None = None
        self.port = free_port()

    def condition(self, on: bool | None) -> None:
        if self.pinner is not None and on != self.on:
            self.pinner.stop()
            self.pinner = None
        if on is not None and self.pinner is None:
            (self.state_dir / "inspect.sock").unlink(missing_ok=True)
            self.pinner = start_pinner(self.runtime, self.state_dir, test_settings=False,
                                       cpu_manager={"reserved_cpus": "0"},
                                       metrics={"enabled": True, "port": self.port},
                                       reconcile={"runtime_record_quiet_seconds": 1.0 if on else 0.0})
        self.on = on

    def converge(self, shared: list[str]) -> None:
        rt = self.runtime
        self.condition(True)
        before = self.settled()  # the records Synchronize found stale (created without us) first
        gpod = rt.run_pod("guaranteed", 1000, 1000, containers=0)
        cid = create_in(rt, gpod, "c0")
        rt.cri.start_container(cid)
        began = time.perf_counter()
        while record_updates(self.port) - before < len(shared):
            if time.perf_counter() - began > 120:
                break
            time.sleep(0.05)
        took = time.perf_counter() - began
        pool = rt.cgroup_cpuset(shared[0])
        wrong = [c for c in shared if recorded(rt, c) != pool]
        print(f"  convergence: {len(shared)} records in line {took:.2f} s after the Guaranteed start "
              f"(quiet 1 s included; {took / max(1, len(shared)) * 1000:.1f} ms per record); "
              f"records not matching the pool {pool!r}: {len(wrong)}")
        rt.remove_pod(gpod, stop_timeout_s=0)

    def settled(self, still: float = 2.0) -> float:
        """The counter once it has not moved for ``still`` seconds."""
        value, since = record_updates(self.port), time.monotonic()
        while time.monotonic() - since < still:
            time.sleep(0.2)
            now = record_updates(self.port)
            if now != value:
                value, since = now, time.monotonic()
        return value

    def sample(self, out: dict[str, list[float]]) -> None:
        rt = self.runtime
        gpod = rt.run_pod("guaranteed", 1000, 1000, containers=0)
        bpod = rt.run_pod("burstable", 250, 500, containers=0)
        t0 = time.perf_counter()
        g = create_in(rt, gpod, "c0")
        t1 = time.perf_counter()
        rt.cri.start_container(g)
        t2 = time.perf_counter()
        time.sleep(1.0 + self.rng.uniform(0, 0.4))
        t3 = time.perf_counter()
        b = create_in(rt, bpod, "b0")
        t4 = time.perf_counter()
        rt.cri.start_container(b)
        t5 = time.perf_counter()
        rt.cri.stop_container(g, timeout_s=0)
        t6 = time.perf_counter()
        rt.cri.remove_container(g)
        t7 = time.perf_counter()
        del gpod.containers["c0"]
        gpod.instances.remove(("c0", g))
        for name, value in zip(METRICS, (t1 - t0, t2 - t1, t4 - t3, t5 - t4, t6 - t5, t7 - t6), strict=True):
            out[name].append(value)
        rt.remove_pod(gpod, stop_timeout_s=0)
        rt.remove_pod(bpod, stop_timeout_s=0)
        time.sleep(0.3)

    def run(self, samples: int, block: int) -> dict[str, dict[str, list[float]]]:
        out: dict[str, dict[str, list[float]]] = {c: {m: [] for m in METRICS} for c in CONDITIONS}
        order = list(CONDITIONS)
        while min(len(v["stop"]) for v in out.values()) < samples:
            for name in order:
                self.condition(name == "records-on")
                for _ in range(min(block, samples - len(out[name]["stop"]))):
                    self.sample(out[name])
            order.reverse()
        return out


def bench_runtime(key: str, n: int, samples: int, block: int) -> None:
    workdir, lock = claim_workdir(e2e_base_dir() / f"bench-records-{key}")
    runtime = PrivateContainerd(key, workdir)
    state_dir = workdir / "pinner"
    state_dir.mkdir(exist_ok=True)
    rng = random.Random(35)
    bench = Bench(runtime, state_dir, rng)
    try:
        runtime.start()
        print(f"containerd {runtime.version} ({key}), N = {n} shared containers")
        shared: list[str] = []
        while len(shared) < n:
            pod = runtime.run_pod("burstable", 250, 500, containers=min(10, n - len(shared)))
            shared += pod.container_ids
        bench.converge(shared)
        out = bench.run(samples, block)
        print(f"  event latency, {samples} samples per condition, load average "
              f"{Path('/proc/loadavg').read_text().split()[0]} (median ms: on / off, added on - off [95 %])")
        for m in METRICS:
            on, off = out["records-on"][m], out["records-off"][m]
            lo, hi = interval(on, off, rng)
            med_on, med_off = statistics.median(on) * 1000, statistics.median(off) * 1000
            print(f"    {m:18} {med_on:7.1f} / {med_off:7.1f}   {med_on - med_off:+6.1f} [{lo:+.1f} .. {hi:+.1f}]")
    finally:
        bench.condition(None)
        runtime.stop()
        lock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", choices=["1.7", "2.1", "both"], default="both")
    parser.add_argument("--shared", type=int, default=100)
    parser.add_argument("--samples", type=int, default=12)
    parser.add_argument("--block", type=int, default=3)
    args = parser.parse_args()
    for key in ("1.7", "2.1") if args.runtime == "both" else (args.runtime,):
        bench_runtime(key, args.shared, args.samples, args.block)


if __name__ == "__main__":
    main()
