"""Time one full best-effort admission: CPU hint generation plus the Topology Manager merge.

Three hint providers: CPUs (from the free set), a GPU provider (devices on two
NUMA nodes) and a NIC provider (two ports on NUMA 0 and 1). Machines are
built in-process: 256 CPUs = 2 sockets x 4 NUMA x 16 cores x 2 threads, and
1024 CPUs = 2 sockets x 8 NUMA x 32 cores x 2 threads. Free sets: empty node,
lower half of the NUMA nodes fully taken, and a random half of all CPUs taken.

Second table: prefer-closest-numa-nodes with CPU hints only (no device hint to pin the
answer), all CPUs free, large requests (up to 576 CPUs = 9 of 16 NUMA nodes), once with the
machines' SLIT distances and once with every remote distance equal (nothing to prune by).
"cpu p99" is this thread's CPU time: on a busy shared machine the wall-clock p99 mostly
measures the neighbours.

Third table, against the kubelet (issue 36): the first table's inputs on 8 NUMA nodes under
single-numa-node and best-effort, median of this thread's CPU time beside the kubelet's published
median for merge-only single-numa-node on 8 NUMA nodes (its Go code timed on the same machine and
inputs: 21-48 us). Its best-effort figure was published only as a ratio to ours (0.8-1.9x), but on
the same inputs it does at least its single-numa-node work (the same hint generation, then the whole
cross product where single-numa-node keeps one-node hints only), so 21 us is its floor there too.
Target: every row's median at most 21 us, the fastest kubelet figure.

Targets: p99 < 1 ms (256 CPUs / 8 NUMA) and < 10 ms (1024 CPUs / 16 NUMA); the kubelet rows above.
Run: .venv/bin/python benchmarks/bench_merge.py [--repeat N] [--repeat-kubelet N]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from collections.abc import Callable

from shapes import machine
from timing import p50_p99

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import Topology
from nri_pinner.engine.topologymanager.cpu_hints import CPUHintProvider
from nri_pinner.engine.topologymanager.hints import (
    HintProvider,
    HintRequest,
    ResourceHints,
    StaticHintProvider,
    TopologyHint,
    mask_of,
)
from nri_pinner.engine.topologymanager.merge import Policy, TopologyManager, merge_container


def device_hints(nodes: int) -> dict[str, tuple[TopologyHint, ...]]:
    gpu = (1, nodes // 2 + 1)
    return {
        "vendor.com/gpu": (TopologyHint(mask_of([gpu[0]]), True), TopologyHint(mask_of([gpu[1]]), True),
                           TopologyHint(mask_of(gpu), False)),
        "vendor.com/nic": (TopologyHint(mask_of([0]), True), TopologyHint(mask_of([1]), True),
                           TopologyHint(mask_of([0, 1]), False)),
    }


class _Named:
    """Splits the static hints into two providers so the merge sees three."""

    def __init__(self, name: str) -> None:
        self.name = name

    def hints(self, request: HintRequest) -> ResourceHints | None:
        got = StaticHintProvider().hints(request) or {}
        return {k: v for k, v in got.items() if self.name in k} or None


def free_sets(topology: Topology, rng: random.Random) -> dict[str, CPUSet]:
    nodes = topology.numa_nodes
    lower = topology.cpus_in_numa(nodes[: len(nodes) // 2])
    every = topology.all_cpus.sorted()
    taken = CPUSet(rng.sample(every, len(every) // 2))
    return {"empty": topology.all_cpus, "half-numa-taken": topology.all_cpus - lower,
            "random-half-taken": topology.all_cpus - taken}


def _constant(free: CPUSet) -> Callable[[], CPUSet]:
    return lambda: free


def equal_remote(topology: Topology) -> Topology:
    nodes = topology.numa_nodes
    return Topology(cpus=topology.cpus, numa_distances={a: {b: 10 if a == b else 20 for b in nodes} for a in nodes})


def run_closest(repeat: int) -> bool:
    """prefer-closest-numa-nodes, CPU hints only: the search the device hints never reach."""
    ok = True
    print(f"\nprefer-closest-numa-nodes, CPU hints only, all CPUs free\n"
          f"{'machine':16} {'distances':10} {'req':>4} {'median ms':>10} {'p99 ms':>8} {'cpu p99':>8}  result")
    for label, base, target_ms, sizes in (("256cpu/8numa", machine(2, 4, 16, 2), 1.0, (16, 64, 128, 160)),
                                          ("1024cpu/16numa", machine(2, 8, 32, 2), 10.0, (64, 256, 512, 576))):
        for dist_label, topology in (("slit", base), ("equal", equal_remote(base))):
            manager = TopologyManager.from_topology(topology, Policy.BEST_EFFORT, prefer_closest_numa_nodes=True)
            providers: list[HintProvider] = [CPUHintProvider(topology, _constant(topology.all_cpus))]
            for request in sizes:
                req = HintRequest("pod", "c", exclusive_cpus=request)
                samples, cpu = [], []
                for _ in range(repeat):
                    start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
                    result = merge_container(manager, providers, req)
                    cpu.append((time.thread_time_ns() - start_cpu) / 1e6)
                    samples.append((time.perf_counter_ns() - start) / 1e6)
                median, p99 = p50_p99(samples)
                ok &= p99 < target_ms
                print(f"{label:16} {dist_label:10} {request:>4} {median:>10.3f} {p99:>8.3f} "
                      f"{p50_p99(cpu)[1]:>8.3f}  {result.hint}")
    return ok


KUBELET_US = {Policy.SINGLE_NUMA_NODE: "21-48", Policy.BEST_EFFORT: ">=21"}  # published p50, issue 36
KUBELET_BEST_US = 21.0


def run_vs_kubelet(repeat: int) -> bool:
    """Merge-only on 8 NUMA nodes (CPU hints generated + GPU + NIC, merged), beside the kubelet."""
    ok, met = True, 0
    topology = machine(2, 4, 16, 2)
    sets = free_sets(topology, random.Random(42))
    one, five, _ = os.getloadavg()
    print(f"\nmerge-only on 8 NUMA nodes vs the kubelet (published p50, same inputs), {repeat} samples per row; "
          f"load average {one:.2f} (1 min) {five:.2f} (5 min)\n"
          f"{'policy':17} {'free set':18} {'req':>4} {'p50 us':>7} {'cpu p50':>8} {'kubelet':>8}  result")
    rows = 0
    for policy in (Policy.SINGLE_NUMA_NODE, Policy.BEST_EFFORT):
        manager = TopologyManager.from_topology(topology, policy)
        for free_label, free in sets.items():
            providers: list[HintProvider] = [CPUHintProvider(topology, _constant(free)), _Named("gpu"), _Named("nic")]
            for request in (1, 4, 16, 64):
                req = HintRequest("pod", "c", exclusive_cpus=request, static_hints=device_hints(8))
                wall, cpu = [], []
                gc.collect()
                for _ in range(repeat):
                    start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
                    result = merge_container(manager, providers, req)
                    cpu.append((time.thread_time_ns() - start_cpu) / 1e3)
                    wall.append((time.perf_counter_ns() - start) / 1e3)
                cpu50 = statistics.median(cpu)
                good = cpu50 <= KUBELET_BEST_US
                ok &= good
                met += good
                rows += 1
                print(f"{policy.value:17} {free_label:18} {request:>4} {statistics.median(wall):>7.1f} {cpu50:>8.1f} "
                      f"{KUBELET_US[policy]:>8}  {'met' if good else 'MISSED'} ({result.hint}"
                      f"{'' if result.admit else ', rejected'})")
    print(f"kubelet comparison: {met}/{rows} rows at or under {KUBELET_BEST_US:g} us (cpu p50)")
    return ok


def run(repeat: int, repeat_kubelet: int) -> bool:
    ok = True
    rng = random.Random(42)
    machines = [("256cpu/8numa", machine(2, 4, 16, 2), 1.0), ("1024cpu/16numa", machine(2, 8, 32, 2), 10.0)]
    print(f"{'machine':16} {'free set':18} {'req':>4} {'median ms':>10} {'p99 ms':>8}  result")
    for label, topology, target_ms in machines:
        manager = TopologyManager.from_topology(topology, Policy.BEST_EFFORT, prefer_closest_numa_nodes=False)
        for free_label, free in free_sets(topology, rng).items():
            cpu = CPUHintProvider(topology, _constant(free))
            providers: list[HintProvider] = [cpu, _Named("gpu"), _Named("nic")]
            for request in (1, 4, 16, 64):
                req = HintRequest("pod", "c", exclusive_cpus=request,
                                  static_hints=device_hints(len(topology.numa_nodes)))
                samples = []
                for _ in range(repeat):
                    start = time.perf_counter_ns()
                    result = merge_container(manager, providers, req)
                    samples.append((time.perf_counter_ns() - start) / 1e6)
                median, p99 = p50_p99(samples)
                ok &= p99 < target_ms
                print(f"{label:16} {free_label:18} {request:>4} {median:>10.3f} {p99:>8.3f}  {result.hint}")
    ok &= run_closest(repeat)
    ok &= run_vs_kubelet(repeat_kubelet)
    print("targets met" if ok else "TARGET MISSED (p99 < 1 ms on 256 CPUs, < 10 ms on 1024 CPUs; "
          "merge-only p50 <= 21 us on 8 NUMA nodes)")
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--repeat-kubelet", type=int, default=2000, help="samples per kubelet-comparison row")
    parser.add_argument("--kubelet-only", action="store_true", help="only the comparison with the kubelet")
    args = parser.parse_args()
    if args.kubelet_only:
        sys.exit(0 if run_vs_kubelet(args.repeat_kubelet) else 1)
    sys.exit(0 if run(args.repeat, args.repeat_kubelet) else 1)
