"""The merge with several implicit sources (CPU + device + memory hints) against the naive kubelet
oracle (tests/engine/naive_merge.py: full cross product), on random small machines."""

from __future__ import annotations

import contextlib
import random

import pytest
from naive_merge import naive_merge

from nri_pinner.engine.devicemanager.hints import Device, device_hints
from nri_pinner.engine.memorymanager.policy import MemoryAllocationError, NodeCapacity, StaticMemoryPolicy
from nri_pinner.engine.memorymanager.state import MEMORY, MemoryState
from nri_pinner.engine.topologymanager.cpu_hints import CPUTopologyHints
from nri_pinner.engine.topologymanager.hints import ResourceHints
from nri_pinner.engine.topologymanager.merge import Policy, TopologyManager, merge

GB = 1 << 30


def cpu_family(rng: random.Random, nodes: list[int]) -> CPUTopologyHints:
    total = {n: 4 for n in nodes}
    free = {n: rng.randint(0, 4) for n in nodes}
    request = rng.randint(1, 6)
    greedy, acc = 0, 0
    for w in sorted(total.values(), reverse=True):
        greedy, acc = greedy + 1, acc + w
        if acc >= request:
            break
    return CPUTopologyHints(node_weights=free, required=0, threshold=request, min_affinity=greedy,
                            node_sockets={n: 0 for n in nodes}, min_sockets=None)


@pytest.mark.parametrize("policy", ["best-effort", "restricted", "single-numa-node"])
@pytest.mark.parametrize("closest", [False, True])
def test_three_implicit_providers_match_the_oracle(policy: str, closest: bool) -> None:
    rng = random.Random(f"{policy}{closest}")
    for _ in range(120):
        nodes = list(range(rng.randint(2, 4)))
        dist = {a: {b: 10 if a == b else rng.choice([12, 20, 30]) for b in nodes} for a in nodes}
        for a in nodes:
            for b in nodes:
                dist[b][a] = dist[a][b]
        cpu = cpu_family(rng, nodes)
        devices = [Device(f"d{i}", frozenset({rng.choice(nodes)})) for i in range(rng.randint(1, 2))]
        dev = device_hints(nodes, devices, [d.id for d in devices], [], len(devices))
        mem_policy = StaticMemoryPolicy([NodeCapacity(n, 4 * GB) for n in nodes])
        mstate = MemoryState()
        for k in range(rng.randint(0, 2)):
            with contextlib.suppress(MemoryAllocationError):
                mstate = mem_policy.allocate(mstate, f"p{k}", "c", {MEMORY: rng.randint(1, 6) * GB}, None)
        mem = mem_policy.hints(mstate, "new", "c", {MEMORY: rng.randint(1, 8) * GB})
        answers: list[ResourceHints | None] = [{"cpu": cpu}, {"gpu": dev}, mem]
        def distance(a: int, b: int, dist: dict[int, dict[int, int]] = dist) -> int:
            return dist[a][b]

        manager = TopologyManager(Policy(policy), tuple(nodes), closest, distance)
        fast = merge(manager, answers)
        oracle_in = [{r: None if hs is None else [(h.affinity, h.preferred) for h in hs] for r, hs in a.items()}
                     for a in answers if a]
        (mask, preferred), admit = naive_merge(policy, nodes, oracle_in, prefer_closest=closest,
                                               distance=distance)
        assert (fast.hint.affinity, fast.hint.preferred, fast.admit) == (mask, preferred, admit)
