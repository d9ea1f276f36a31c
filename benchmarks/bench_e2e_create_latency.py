"""CRI CreateContainer / StartContainer latency on a real containerd, with nri-pinner connected and without.

For each runtime (a private instance, see tests/e2e/harness.py; needs root and the runtimes from
scripts/install-runtimes.sh) the two conditions ALTERNATE in blocks within one run, in an ABBA order
(on, off, off, on, on, ...) so drift of the machine (other load, page cache, containerd's own state)
falls on both. Starting and stopping the real `nri-pinner run` between blocks is not timed.

One sample = a container in its own new pod: RunPodSandbox (not timed), then CreateContainer and
StartContainer through CRI, timed separately, then the pod is removed (not timed). A background pod
with ``--background`` (3) Burstable containers runs for the whole run, so a Guaranteed create with
nri-pinner carries that many shared-pool updates (they shrink to the reserved CPU) in the same NRI
reply, which containerd applies before CreateContainer returns; the script checks the shrink landed
in a background container's cgroup right after each such create. ``--background 0`` measures the
Guaranteed create without any update in the reply.

nri-pinner runs on its embedded defaults with only this containerd's paths and ``reserved_cpus = "0"``
(on this 2-CPU VM that leaves CPU 1 for one exclusive container).

    .venv/bin/python benchmarks/bench_e2e_create_latency.py [--runtime 1.7|2.1|both] [--n 50] [--block 10]
        [--n-guaranteed N] [--background 3]

Prints, per runtime and QoS: median / p10 / p90 in ms for create, start and create+start, with and
without the plugin, and the median difference (with - without) with a 95% bootstrap interval.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the e2e harness lives in tests/e2e

from tests.e2e import kubelet_pod as kp  # noqa: E402
from tests.e2e.conftest import e2e_base_dir  # noqa: E402
from tests.e2e.harness import PodHandle, PrivateContainerd, claim_workdir  # noqa: E402
from tests.e2e.pinner import Pinner, start_pinner  # noqa: E402
from tests.e2e.pods import WORKLOAD, add_to_spec, container_request, resources_for, send_create  # noqa: E402

BURSTABLE = ("burstable", 250, 500)
GUARANTEED = ("guaranteed", 1000, 1000)
WARMUP = 3
BOOTSTRAP_ROUNDS = 2000


@dataclass
class Samples:
    create: list[float] = field(default_factory=list)
    start: list[float] = field(default_factory=list)

    @property
    def total(self) -> list[float]:
        return [c + s for c, s in zip(self.create, self.start, strict=True)]


def timed_container(runtime: PrivateContainerd, qos: str, request: int, limit: int) -> tuple[PodHandle, float, float]:
    """A new pod (untimed) and one container in it, created and started like pods.add_container does:
    returns the pod and the CreateContainer / StartContainer seconds."""
    pod = runtime.run_pod(qos, request, limit, containers=0)
    res = resources_for(qos, request, limit, None, None)
    cri = runtime.cri
    add_to_spec(pod, kp.Container("c0", res, command=WORKLOAD))
    config = container_request(cri, pod, "c0")
    began = time.perf_counter()
    cid = send_create(cri, pod, "c0", config, 0)
    created = time.perf_counter()
    cri.start_container(cid)
    started = time.perf_counter()
    return pod, created - began, started - created


def abba(blocks: int) -> list[bool]:
    """Plugin on/off per block: on, off, off, on, on, off, ... (equal counts when blocks is even)."""
    return [(i + 1) // 2 % 2 == 0 for i in range(blocks)]


class Bench:
    def __init__(self, runtime: PrivateContainerd, state_dir: Path) -> None:
        self.runtime = runtime
        self.state_dir = state_dir
        self.pinner: Pinner | None = None
        self.background: list[str] = []
        self.shrinks_seen = 0

    def plugin(self, on: bool) -> None:
        if on and self.pinner is None:
            (self.state_dir / "inspect.sock").unlink(missing_ok=True)  # start_pinner waits for a new one
            self.pinner = start_pinner(self.runtime, self.state_dir, test_settings=False,
                                       cpu_manager={"reserved_cpus": "0"})
        elif not on and self.pinner is not None:
            self.pinner.stop()
            self.pinner = None

    def block(self, kind: tuple[str, int, int], size: int, out: Samples) -> None:
        qos, request, limit = kind
        for _ in range(size):
            pod, create_s, start_s = timed_container(self.runtime, qos, request, limit)
            out.create.append(create_s)
            out.start.append(start_s)
            if qos == "guaranteed" and self.pinner is not None:
                self.check_exclusive(pod)
            self.runtime.remove_pod(pod, stop_timeout_s=0)  # SIGKILL at once: teardown is not measured

    def check_exclusive(self, pod: PodHandle) -> None:
        """The reply that pinned the Guaranteed container also moved the shared containers off its CPU."""
        pinned = self.runtime.cgroup_cpuset(pod.container_ids[0])
        shared = self.runtime.cgroup_cpuset(self.background[0]) if self.background else "0"
        if pinned == "1" and shared == "0":
            self.shrinks_seen += 1

    def run(self, kind: tuple[str, int, int], n: int, block: int) -> tuple[Samples, Samples]:
        with_plugin, without = Samples(), Samples()
        blocks = 2 * -(-n // block)
        for on in abba(blocks):
            target = with_plugin if on else without
            self.plugin(on)
            self.block(kind, min(block, n - len(target.create)), target)
        self.plugin(False)
        return with_plugin, without


def quantiles(values: list[float]) -> tuple[float, float, float]:
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return statistics.median(values), deciles[0], deciles[8]


def median_diff_interval(a: list[float], b: list[float], rng: random.Random) -> tuple[float, float]:
    """95% percentile-bootstrap interval of median(a) - median(b)."""
    diffs = sorted(
        statistics.median(rng.choices(a, k=len(a))) - statistics.median(rng.choices(b, k=len(b)))
        for _ in range(BOOTSTRAP_ROUNDS)
    )
    return diffs[int(0.025 * BOOTSTRAP_ROUNDS)], diffs[int(0.975 * BOOTSTRAP_ROUNDS) - 1]


def report(title: str, with_plugin: Samples, without: Samples, rng: random.Random) -> None:
    print(f"  {title}: {len(with_plugin.create)} with / {len(without.create)} without nri-pinner")
    print(f"    {'ms':14} {'median':>7} {'p10':>7} {'p90':>7}")
    for name in ("create", "start", "total"):
        a, b = getattr(with_plugin, name), getattr(without, name)
        label = "create+start" if name == "total" else name
        for cond, values in (("with", a), ("without", b)):
            med, p10, p90 = (v * 1000 for v in quantiles(values))
            print(f"    {label + ' ' + cond:22} {med:7.1f} {p10:7.1f} {p90:7.1f}")
        low, high = (v * 1000 for v in median_diff_interval(a, b, rng))
        diff = (statistics.median(a) - statistics.median(b)) * 1000
        print(f"    {label} median with - without: {diff:+.1f} ms (95% bootstrap {low:+.1f} .. {high:+.1f})")


def bench_runtime(key: str, n: int, block: int, n_guaranteed: int, background: int) -> None:
    workdir, lock = claim_workdir(e2e_base_dir() / f"bench-latency-{key}")
    runtime = PrivateContainerd(key, workdir)
    state_dir = workdir / "pinner"
    state_dir.mkdir(exist_ok=True)
    bench = Bench(runtime, state_dir)
    rng = random.Random(1)
    try:
        runtime.start()
        print(f"containerd {runtime.version} ({key}): one pod per container, blocks of {block} alternating "
              f"ABBA, background pod with {background} Burstable containers")
        if background:
            bg = runtime.run_pod(*BURSTABLE, containers=background, name="bench-background")
            bench.background = bg.container_ids
        for _ in range(WARMUP):  # first creates on a fresh containerd unpack the snapshot
            pod, _, _ = timed_container(runtime, *BURSTABLE)
            runtime.remove_pod(pod, stop_timeout_s=0)
        with_plugin, without = bench.run(BURSTABLE, n, block)
        report(f"Burstable {BURSTABLE[1]}m/{BURSTABLE[2]}m", with_plugin, without, rng)
        if n_guaranteed:
            with_plugin, without = bench.run(GUARANTEED, n_guaranteed, block)
            report(f"Guaranteed {GUARANTEED[1]}m/{GUARANTEED[2]}m", with_plugin, without, rng)
            seen = "exclusive CPU 1" + (" + background shrunk to CPU 0" if background else "")
            print(f"    {seen} right after create: {bench.shrinks_seen}/{len(with_plugin.create)} creates "
                  "with nri-pinner")
    finally:
        bench.plugin(False)
        runtime.stop()
        lock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", choices=["1.7", "2.1", "both"], default="both")
    parser.add_argument("--n", type=int, default=50, help="Burstable containers per condition (default 50)")
    parser.add_argument("--n-guaranteed", type=int, default=None,
                        help="Guaranteed containers per condition (default: --n; 0 skips)")
    parser.add_argument("--block", type=int, default=10, help="containers per block between plugin on/off")
    parser.add_argument("--background", type=int, default=3,
                        help="Burstable containers running throughout (each one is in a Guaranteed create's reply)")
    args = parser.parse_args()
    n_guaranteed = args.n if args.n_guaranteed is None else args.n_guaranteed
    if args.n < 2 or args.block < 1 or n_guaranteed < 0 or 0 < n_guaranteed < 2 or args.background < 0:
        parser.error("need --n >= 2, --block >= 1, --background >= 0 and --n-guaranteed 0 or >= 2")
    for key in ("1.7", "2.1") if args.runtime == "both" else (args.runtime,):
        bench_runtime(key, args.n, args.block, n_guaranteed, args.background)


if __name__ == "__main__":
    main()
