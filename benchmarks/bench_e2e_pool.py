"""What a Guaranteed container costs on a real containerd as the number of shared containers grows.

For each runtime (private instance, tests/e2e/harness.py; needs root and scripts/install-runtimes.sh)
and each N in --shared: N Burstable containers run (in pods of up to 10), then three conditions
rotate in blocks within one run — nri-pinner, no plugin, and the minimal example plugin
`examples/pin_fixed` (pins every container to all CPUs, no pool logic) — so machine drift falls on all.
One sample, one new Guaranteed pod (1 CPU; its sandbox is not timed):
- CRI CreateContainer, StartContainer, StopContainer (timeout 0) and RemoveContainer of its
  container (Guaranteed, 1 CPU), each timed;
- a Burstable CreateContainer issued --during ms after the Guaranteed create began (both in flight:
  the runtime serializes NRI events, so this is what any other pod on the node waits).

Prints per N and condition the medians, and per N the added median (nri-pinner − none, nri-pinner −
pin_fixed) with 95% bootstrap intervals, and the load average. On this 2-CPU VM only CPU 1 can be
exclusive. The pool table (issue 19) is the default; the minimal-plugin comparison (create, start,
stop and remove vs no plugin and vs pin_fixed, n >= 100 per condition) is the same harness:

    .venv/bin/python benchmarks/bench_e2e_pool.py [--runtime 1.7|2.1|both] [--shared 0 10 30 60 100]
        [--samples 24] [--block 4] [--during 5]
    .venv/bin/python benchmarks/bench_e2e_pool.py --runtime both --shared 100 --samples 300 --block 5
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the e2e harness lives in tests/e2e

from tests.e2e import kubelet_pod as kp  # noqa: E402
from tests.e2e.conftest import e2e_base_dir  # noqa: E402
from tests.e2e.harness import PodHandle, PrivateContainerd, claim_workdir  # noqa: E402
from tests.e2e.pin_plugin import PIN_MODULE, online_cpus, plugin_argv  # noqa: E402
from tests.e2e.pinner import Pinner, start_pinner  # noqa: E402
from tests.e2e.plugins import PluginProcess  # noqa: E402
from tests.e2e.pods import WORKLOAD, add_to_spec, container_request, resources_for, send_create  # noqa: E402

CONDITIONS = ("nri-pinner", "none", "pin_fixed")
METRICS = ("create", "start", "stop", "remove", "burstable-during")
BOOTSTRAP_ROUNDS = 2000
B = TypeVar("B", bound="Bench")


@dataclass
class Samples:
    values: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in METRICS})


def create_in(runtime: PrivateContainerd, pod: PodHandle, name: str) -> str:
    res = resources_for(pod.qos.value, *pod_cpu(pod), None, None)
    add_to_spec(pod, kp.Container(name, res, command=WORKLOAD))
    return send_create(runtime.cri, pod, name, container_request(runtime.cri, pod, name), 0)


def pod_cpu(pod: PodHandle) -> tuple[int, int]:
    return (1000, 1000) if pod.qos.value == "guaranteed" else (250, 500)


class Bench:
    def __init__(self, runtime: PrivateContainerd, state_dir: Path, during_s: float) -> None:
        self.runtime, self.state_dir, self.during_s = runtime, state_dir, during_s
        self.pinner: Pinner | None = None
        self.fixed: PluginProcess | None = None

    def condition(self, name: str) -> None:
        if self.pinner is not None and name != "nri-pinner":
            self.pinner.stop()
            self.pinner = None
        if self.fixed is not None and name != "pin_fixed":
            self.fixed.stop()
            self.runtime.plugins.remove(self.fixed)
            self.fixed = None
        if name == "nri-pinner" and self.pinner is None:
            (self.state_dir / "inspect.sock").unlink(missing_ok=True)
            self.pinner = start_pinner(self.runtime, self.state_dir, test_settings=False,
                                       cpu_manager={"reserved_cpus": "0"})
        if name == "pin_fixed" and self.fixed is None:
            cpus = ",".join(map(str, online_cpus()))
            self.fixed = self.runtime.start_plugin(
                plugin_argv(PIN_MODULE, "--socket", str(self.runtime.nri_socket), "--cpus", cpus), name="50-pin-fixed")

    def sample(self, out: Samples) -> None:
        rt = self.runtime
        gpod = rt.run_pod("guaranteed", 1000, 1000, containers=0)
        bpod = rt.run_pod("burstable", 250, 500, containers=0)
        during: list[float] = []

        def other() -> None:
            time.sleep(self.during_s)
            began = time.perf_counter()
            create_in(rt, bpod, "b0")
            during.append(time.perf_counter() - began)

        side = threading.Thread(target=other)
        began = time.perf_counter()
        side.start()
        cid = create_in(rt, gpod, "c0")
        created = time.perf_counter()
        side.join()
        rt.cri.start_container(cid)
        started = time.perf_counter()
        rt.cri.stop_container(cid, timeout_s=0)
        stopped = time.perf_counter()
        rt.cri.remove_container(cid)
        removed = time.perf_counter()
        del gpod.containers["c0"]
        gpod.instances.remove(("c0", cid))
        out.values["create"].append(created - began)
        out.values["start"].append(started - created)
        out.values["stop"].append(stopped - started)
        out.values["remove"].append(removed - stopped)
        out.values["burstable-during"].append(during[0])
        rt.remove_pod(gpod, stop_timeout_s=0)
        rt.remove_pod(bpod, stop_timeout_s=0)

    def run(self, samples: int, block: int, conditions: tuple[str, ...] = CONDITIONS) -> dict[str, Samples]:
        out = {c: Samples() for c in conditions}
        order = list(conditions)
        while min(len(s.values["create"]) for s in out.values()) < samples:
            for name in order:
                self.condition(name)
                for _ in range(min(block, samples - len(out[name].values["create"]))):
                    self.sample(out[name])
            order.reverse()  # ABC CBA ABC ...: drift falls on every condition alike
        self.condition("off")
        return out


def interval(a: list[float], b: list[float], rng: random.Random) -> tuple[float, float]:
    diffs = sorted(statistics.median(rng.choices(a, k=len(a))) - statistics.median(rng.choices(b, k=len(b)))
                   for _ in range(BOOTSTRAP_ROUNDS))
    return diffs[int(0.025 * BOOTSTRAP_ROUNDS)] * 1000, diffs[int(0.975 * BOOTSTRAP_ROUNDS) - 1] * 1000


def report(n: int, out: dict[str, Samples], rng: random.Random) -> None:
    print(f"  N = {n} shared (Burstable) containers running; timed: a Guaranteed container (burstable-during: "
          f"a Burstable one); {len(out['none'].values['create'])} samples per condition; load average "
          f"{Path('/proc/loadavg').read_text().split()[0]} (median ms: {' / '.join(CONDITIONS)})")
    for m in METRICS:
        meds = [statistics.median(out[c].values[m]) * 1000 for c in CONDITIONS]
        pinner, none, fixed = (out[c].values[m] for c in CONDITIONS)
        lo, hi = interval(pinner, none, rng)
        flo, fhi = interval(pinner, fixed, rng)
        print(f"    {m:17} {meds[0]:7.1f} / {meds[1]:7.1f} / {meds[2]:7.1f}   added vs none {meds[0] - meds[1]:+6.1f} "
              f"[{lo:+.1f} .. {hi:+.1f}]   vs pin_fixed {meds[0] - meds[2]:+6.1f} [{flo:+.1f} .. {fhi:+.1f}]")


@contextmanager
def benched_runtime(key: str, workdir_name: str, make: Callable[[PrivateContainerd, Path], B]) -> Iterator[B]:
    """A private containerd started with a `Bench` on it (made by `make`), two warm-up samples taken (the first
    creates unpack the image); at the end the plugin stopped, then the runtime."""
    workdir, lock = claim_workdir(e2e_base_dir() / workdir_name)
    runtime = PrivateContainerd(key, workdir)
    state_dir = workdir / "pinner"
    state_dir.mkdir(exist_ok=True)
    bench = make(runtime, state_dir)
    try:
        runtime.start()
        for _ in range(2):
            bench.sample(Samples())
        yield bench
    finally:
        bench.condition("off")
        runtime.stop()
        lock.close()


def run_shared(runtime: PrivateContainerd, running: int, n: int) -> int:
    """Burstable pods of up to 10 containers until `n` shared containers run; returns how many run."""
    while running < n:
        k = min(10, n - running)
        runtime.run_pod("burstable", 250, 500, containers=k)
        running += k
    return running


def bench_runtime(key: str, shared: list[int], samples: int, block: int, during_s: float) -> None:
    rng = random.Random(19)
    running = 0
    with benched_runtime(key, f"bench-pool-{key}", lambda rt, state: Bench(rt, state, during_s)) as bench:
        print(f"containerd {bench.runtime.version} ({key}): Guaranteed create/start/stop and a Burstable create "
              f"{during_s * 1000:.0f} ms into it; conditions rotate in blocks of {block}")
        for n in sorted(shared):
            running = run_shared(bench.runtime, running, n)
            report(n, bench.run(samples, block), rng)


def sample_args(parser: argparse.ArgumentParser, samples: int, block: int) -> None:
    """The options every bench_e2e_* script built on this one's sample takes."""
    parser.add_argument("--runtime", choices=["1.7", "2.1", "both"], default="both")
    parser.add_argument("--samples", type=int, default=samples)
    parser.add_argument("--block", type=int, default=block)
    parser.add_argument("--during", type=float, default=5.0, help="ms after the Guaranteed create began")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sample_args(parser, samples=24, block=4)
    parser.add_argument("--shared", type=int, nargs="+", default=[0, 10, 30, 60, 100])
    args = parser.parse_args()
    if args.samples < 2 or args.block < 1 or min(args.shared) < 0:
        parser.error("need --samples >= 2, --block >= 1, --shared >= 0")
    for key in ("1.7", "2.1") if args.runtime == "both" else (args.runtime,):
        bench_runtime(key, args.shared, args.samples, args.block, args.during / 1000)


if __name__ == "__main__":
    main()
