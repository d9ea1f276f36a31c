"""Time one allocation decision (takeByTopology) on large synthetic machines.

Prints median and p99 per case: 1/4/16/64 CPUs on an empty node and on a node with
half of its NUMA nodes fully taken, for 256 CPUs (2 sockets x 4 NUMA x 16 cores x 2
threads) and 1024 CPUs (16 NUMA nodes), with the default (packed) allocator and the
distribute-cpus-across-numa one. Targets: p99 < 1 ms (256 CPUs), < 10 ms (1024 CPUs).

    .venv/bin/python benchmarks/bench_allocate.py [--repeat N]
"""

from __future__ import annotations

import argparse
import functools
import gc
import time
from collections.abc import Callable

from shapes import machine
from timing import p50_p99

from nri_pinner.engine.cpumanager.allocator import take_by_topology_numa_distributed, take_by_topology_numa_packed
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import Topology


def half_used(topo: Topology) -> CPUSet:
    nodes = topo.numa_nodes
    return topo.online - topo.cpus_in_numa(nodes[: len(nodes) // 2])


def measure(fn: Callable[[], CPUSet], repeat: int) -> tuple[float, float]:
    fn()  # warm the per-topology index
    samples = []
    gc.disable()  # a collection pause is not part of the decision
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1000)
    finally:
        gc.enable()
    return p50_p99(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=300)
    args = ap.parse_args()
    machines = {
        "256 CPUs / 8 NUMA": (machine(2, 4, 16, 2), 1.0),
        "1024 CPUs / 16 NUMA": (machine(2, 8, 32, 2), 10.0),
    }
    algos: dict[str, Callable[[Topology, CPUSet, int], CPUSet]] = {
        "packed": take_by_topology_numa_packed,
        "distributed": take_by_topology_numa_distributed,
    }
    print(f"{'machine':<22}{'node':<8}{'algorithm':<13}{'cpus':>5}{'median ms':>11}{'p99 ms':>9}  target")
    for name, (topo, target) in machines.items():
        for node, avail in (("empty", topo.online), ("half", half_used(topo))):
            for algo, fn in algos.items():
                for n in (1, 4, 16, 64):
                    med, p99 = measure(functools.partial(fn, topo, avail, n), args.repeat)
                    ok = "ok" if p99 < target else "MISSED"
                    print(f"{name:<22}{node:<8}{algo:<13}{n:>5}{med:>11.3f}{p99:>9.3f}  <{target:g} ms {ok}")


if __name__ == "__main__":
    main()
