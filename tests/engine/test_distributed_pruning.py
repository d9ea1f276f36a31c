"""distribute-cpus-across-numa skips NUMA combinations that provably cannot beat the best balance
so far (cpumanager/distributed.py ``_balance_floor``); the choice must stay the kubelet's.

Checked against the straightforward port (naive_alloc.naive_distributed: every combination and
every remainder subset scored, Go slice aliasing included) on machines with many equal NUMA
nodes, where most combinations tie and the skipping does the most: empty nodes, nodes emptied
evenly, and random partial fills.
"""

from __future__ import annotations

import math
import random

import pytest
from kube_topologies import _build
from naive_alloc import details_of, naive_distributed

from nri_pinner.engine.cpumanager.allocator import take_by_topology_numa_distributed
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import Topology


def machine(sockets: int, numa_per_socket: int, cores_per_numa: int) -> Topology:
    """Two threads per core; CPU ids numbered NUMA node by NUMA node."""
    per_numa = cores_per_numa * 2

    def shape(cpu: int) -> tuple[int, int, int, int]:
        numa = cpu // per_numa
        return numa // numa_per_socket, cpu // 2, numa, numa // numa_per_socket

    return _build(sockets * numa_per_socket * per_numa, shape)


MACHINES = [machine(2, 4, 4), machine(1, 6, 3), machine(2, 3, 5)]


def free_set(rng: random.Random, topo: Topology) -> CPUSet:
    mode = rng.choice(["empty", "even", "random"])
    cpus: list[int] = []
    drop = rng.choice([2, 4])
    for node in topo.numa_nodes:
        on_node = sorted(topo.numa_cpus[node])
        if mode == "empty":
            cpus += on_node
        elif mode == "even":
            cpus += on_node[drop:]
        else:
            cpus += rng.sample(on_node, rng.randint(0, len(on_node)))
    return CPUSet(cpus)


@pytest.mark.parametrize("seed", range(6))
def test_pruned_search_matches_the_kubelet_port(seed: int) -> None:
    rng = random.Random(f"distributed-{seed}")
    for _ in range(40):
        topo = rng.choice(MACHINES)
        avail = free_set(rng, topo)
        if len(avail) < 2:
            continue
        group = rng.choice([1, 2])
        n = rng.randint(1, len(avail))
        try:
            want = naive_distributed(details_of(topo), set(avail), n, group)
        except RuntimeError:  # the kubelet fails or hangs there; covered elsewhere
            continue
        got = take_by_topology_numa_distributed(topo, avail, n, cpu_group_size=group)
        assert got == CPUSet(want), (topo.numa_nodes, str(avail), n, group)


def test_aliased_combination_without_the_replay() -> None:
    """The Go-aliased winner computed from combination ranks equals replaying the kubelet's loop:
    every (position, seen) for up to 8 items, random ones up to 16."""
    from nri_pinner.engine.cpumanager.distributed import _aliased_combination, _replayed_combination

    rng = random.Random("aliasing")
    for m in range(1, 17):
        items = sorted(rng.sample(range(40), m))
        for k in range(1, m + 1):
            total = math.comb(m, k)
            pairs = ([(p, s) for p in range(total) for s in range(p + 1, total + 1)] if m <= 8 else
                     [(p, rng.randint(p + 1, total)) for p in (rng.randrange(total) for _ in range(8))])
            for position, seen in pairs:
                assert (_aliased_combination(items, k, position, seen)
                        == _replayed_combination(items, k, position, seen)), (items, k, position, seen)
