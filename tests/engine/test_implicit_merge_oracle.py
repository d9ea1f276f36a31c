"""The merge's search over several implicit sources (topologymanager/implicit_merge.py) against the naive
kubelet oracle (naive_merge.py: the full cross product of every provider's listed hints).

Random small machines with CPU hints (some nodes without free CPUs, reusable CPUs), devices on one or
several nodes, memory *and* hugepages (two Memory Manager sources, each with used-node groups from
earlier single- and cross-NUMA allocations), a NIC up-set and verbatim hints, under every policy with
and without prefer-closest-numa-nodes."""

from __future__ import annotations

import contextlib
import random

import pytest
from naive_merge import naive_merge

from nri_pinner.engine.devicemanager.hints import Device, device_hints
from nri_pinner.engine.memorymanager.policy import MemoryAllocationError, NodeCapacity, StaticMemoryPolicy
from nri_pinner.engine.memorymanager.state import MEMORY, MemoryState
from nri_pinner.engine.topologymanager.cpu_hints import CPUTopologyHints
from nri_pinner.engine.topologymanager.hints import ResourceHints, TopologyHint
from nri_pinner.engine.topologymanager.merge import Policy, TopologyManager, merge
from nri_pinner.engine.topologymanager.upset_hints import UpSetHints

GB = 1 << 30
HUGE = "hugepages-2Mi"


def cpu_family(rng: random.Random, nodes: list[int]) -> CPUTopologyHints:
    free = {n: rng.choice([0, 0, 1, 2, 4]) for n in nodes}
    request = rng.randint(1, 8)
    required = sum(1 << n for n in nodes if rng.random() < 0.15)
    reusable = required.bit_count()
    greedy, acc = len(nodes), 0
    for i, _ in enumerate(nodes, 1):
        acc += 4
        if acc >= request:
            greedy = i
            break
    return CPUTopologyHints(node_weights=free, required=required, threshold=request - reusable,
                            min_affinity=greedy, node_sockets={n: 0 for n in nodes}, min_sockets=None)


def memory_answer(rng: random.Random, nodes: list[int]) -> ResourceHints | None:
    policy = StaticMemoryPolicy([NodeCapacity(n, rng.choice([2, 4, 6]) * GB, {HUGE: rng.choice([0, 1, 2]) * GB})
                                 for n in nodes])
    state = MemoryState()
    for k in range(rng.randint(0, 3)):
        want = {MEMORY: rng.randint(1, 8) * GB}
        if rng.random() < 0.4:
            want[HUGE] = rng.randint(1, 2) * GB
        hint = None
        if rng.random() < 0.5:
            size = rng.randint(1, len(nodes))
            hint = TopologyHint(sum(1 << n for n in rng.sample(nodes, size)), False)
        with contextlib.suppress(MemoryAllocationError):
            state = policy.allocate(state, f"p{k}", "c", want, hint)
    request = {MEMORY: rng.randint(1, 8) * GB}
    if rng.random() < 0.5:
        request[HUGE] = rng.randint(1, 2) * GB
    return policy.hints(state, "new", "c", request)


def answers_for(rng: random.Random, nodes: list[int]) -> list[ResourceHints | None]:
    answers: list[ResourceHints | None] = [{"cpu": cpu_family(rng, nodes)}]
    devices = [Device(f"d{i}", frozenset(rng.sample(nodes, rng.choice([1, 1, 2]))))
               for i in range(rng.randint(1, 3))]
    want = rng.randint(1, len(devices))
    answers.append({"gpu": device_hints(nodes, devices, [d.id for d in devices], [], want)})
    answers.append(memory_answer(rng, nodes))
    extra = rng.random()
    universe = sum(1 << n for n in nodes)
    if extra < 0.2:
        answers.append({"nic": UpSetHints(universe, 1 << rng.choice(nodes))})
    elif extra < 0.4:
        answers.append({"static": tuple(TopologyHint(sum(1 << n for n in rng.sample(nodes, rng.randint(1, 2))),
                                                     rng.random() < 0.5) for _ in range(rng.randint(1, 3)))})
    return answers


def listed(answer: ResourceHints | None) -> dict[str, list[tuple[int | None, bool]] | None] | None:
    if not answer:
        return None
    return {r: None if hs is None else [(h.affinity, h.preferred) for h in hs] for r, hs in answer.items()}


@pytest.mark.parametrize("policy", ["best-effort", "restricted", "single-numa-node"])
@pytest.mark.parametrize("closest", [False, True])
def test_several_implicit_sources_match_the_oracle(policy: str, closest: bool) -> None:
    rng = random.Random(f"implicit-{policy}-{closest}")
    for _ in range(150):
        nodes = list(range(rng.randint(2, 4)))
        dist = {a: {b: 10 if a == b else rng.choice([11, 12, 20, 30]) for b in nodes} for a in nodes}
        for a in nodes:
            for b in nodes:
                dist[b][a] = dist[a][b]

        def distance(a: int, b: int, dist: dict[int, dict[int, int]] = dist) -> int:
            return dist[a][b]

        answers = answers_for(rng, nodes)
        manager = TopologyManager(Policy(policy), tuple(nodes), closest, distance)
        fast = merge(manager, answers)
        (mask, preferred), admit = naive_merge(policy, nodes, [listed(a) for a in answers],
                                               prefer_closest=closest, distance=distance)
        assert (fast.hint.affinity, fast.hint.preferred, fast.admit) == (mask, preferred, admit), answers


def test_five_nodes_best_effort_match_the_oracle() -> None:
    """Larger masks (31 per provider) for the non-preferred search; one memory resource keeps the
    oracle's cross product affordable."""
    rng = random.Random("implicit-five")
    nodes = list(range(5))
    manager = TopologyManager(Policy.BEST_EFFORT, tuple(nodes))
    checked = 0
    while checked < 40:
        answers = answers_for(rng, nodes)[:3]
        mem = answers[2]
        if mem is not None and len(mem) > 1:
            continue
        fast = merge(manager, answers)
        (mask, preferred), admit = naive_merge("best-effort", nodes, [listed(a) for a in answers])
        assert (fast.hint.affinity, fast.hint.preferred, fast.admit) == (mask, preferred, admit), answers
        checked += 1


def test_closest_candidates_come_in_the_merges_order() -> None:
    """The search lists a size's candidates lazily by (summed distance, mask), best-first with
    lower bounds; that must be the merge's own ranking (``same_size_key``), every mask once, on
    asymmetric distance tables too."""
    from nri_pinner.engine.topologymanager.hints import masks_of_size
    from nri_pinner.engine.topologymanager.implicit_merge import by_distance
    from nri_pinner.engine.topologymanager.order import _Order

    rng = random.Random("closest-order")
    for _ in range(200):
        nodes = sorted(rng.sample(range(12), rng.randint(1, 9)))
        dist = {a: {b: rng.choice([10, 11]) if a == b else rng.choice([11, 12, 16, 20, 21, 30]) for b in nodes}
                for a in nodes}

        def distance(a: int, b: int, dist: dict[int, dict[int, int]] = dist) -> int:
            return dist[a][b]

        order = _Order(distance, nodes, closest=True)
        size = rng.randint(1, len(nodes))
        assert list(by_distance(nodes, size, order.table)) == sorted(masks_of_size(nodes, size),
                                                                     key=order.same_size_key)
