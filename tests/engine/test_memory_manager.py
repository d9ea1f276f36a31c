"""Memory Manager static policy: the kubelet's expectations, ported.

Source: kubernetes/kubernetes pkg/kubelet/cm/memorymanager/policy_static_test.go, read at commit
046d201c45cebd19eb1fc4612426761c64802825 (``TestStaticPolicyGetTopologyHints``,
``TestStaticPolicyRemoveContainer``); the allocation rules (default/extended hint,
``isAffinityViolatingNUMAAllocations``) follow policy_static.go of the v1.32 line. The kubelet's
tests give a machine state directly; here the same states come from replaying the same blocks
over capacities chosen so the replay yields the kubelet's tables exactly.
"""

from __future__ import annotations

import pytest

from nri_pinner.engine.memorymanager.policy import MemoryAllocationError, NodeCapacity, StaticMemoryPolicy
from nri_pinner.engine.memorymanager.state import MEMORY, Block, MemoryState, hugepage_resource
from nri_pinner.engine.topologymanager.hints import TopologyHint, mask_of

MB = 1 << 20
GB = 1 << 30
HP1G = "hugepages-1Gi"
HP2M = "hugepages-2Mi"


def h(nodes: list[int], preferred: bool) -> TopologyHint:
    return TopologyHint(mask_of(nodes), preferred)


def four_nodes() -> StaticMemoryPolicy:
    # 3 GiB per node with one 1 GiB page, 512 MiB reserved: memory allocatable 1536 MiB, hugepages 1 GiB
    return StaticMemoryPolicy([NodeCapacity(n, 3 * GB, {HP1G: GB}) for n in range(4)],
                              {n: {MEMORY: 512 * MB} for n in range(4)})


def test_hints_from_an_existing_assignment() -> None:
    p = four_nodes()
    state = MemoryState({("pod1", "container1"): (Block((0,), MEMORY, GB), Block((0,), HP1G, GB))})
    got = p.hints(state, "pod1", "container1", {MEMORY: GB, HP1G: GB})
    assert got == {MEMORY: (h([0], True),), HP1G: (h([0], True),)}


def test_new_hints_skip_nodes_of_another_group() -> None:
    p = four_nodes()
    state = MemoryState({("pod1", "container1"): (Block((0, 1), MEMORY, 2 * GB), Block((0, 1), HP1G, 2 * GB))})
    machine = p.machine(state)
    assert (machine[0].tables[MEMORY].free, machine[1].tables[MEMORY].free) == (0, GB)  # the kubelet's table
    got = p.hints(state, "pod2", "container2", {MEMORY: GB, HP1G: GB})
    assert got is not None
    expected = {h([2], True), h([3], True), h([2, 3], False)}
    assert set(got[MEMORY]) == expected and set(got[HP1G]) == expected


@pytest.mark.parametrize("blocks", [
    (Block((0,), MEMORY, GB),),  # fewer resources than requested
    (Block((0,), MEMORY, GB), Block((0,), HP2M, GB)),  # another resource
    (Block((0,), MEMORY, 512 * MB), Block((0,), HP1G, GB)),  # another size
], ids=["count", "resource", "size"])
def test_mismatched_existing_assignment_gives_no_hints(blocks: tuple[Block, ...]) -> None:
    p = four_nodes()
    assert p.hints(MemoryState({("pod1", "container1"): blocks}), "pod1", "container1",
                   {MEMORY: GB, HP1G: GB}) is None


def test_no_preferred_multi_node_hint_when_one_node_would_do() -> None:
    # memory allocatable 1536 MiB and 20 MiB of 2 MiB pages per node
    p = StaticMemoryPolicy([NodeCapacity(n, 2048 * MB + 20 * MB, {HP2M: 20 * MB}) for n in range(2)],
                           {n: {MEMORY: 512 * MB} for n in range(2)})
    state = MemoryState({("pod1", "container1"): (Block((0, 1), MEMORY, 2 * GB), Block((0, 1), HP2M, 24 * MB))})
    got = p.hints(state, "pod2", "container2", {MEMORY: GB, HP2M: 16 * MB})
    assert got is not None and {r: tuple(v) for r, v in got.items()} == {
        MEMORY: (h([0, 1], False),), HP2M: (h([0, 1], False),)}


def test_remove_cross_numa_assignment_restores_the_machine() -> None:
    p = StaticMemoryPolicy([NodeCapacity(n, 2 * GB, {HP1G: GB}) for n in range(2)],
                           {n: {MEMORY: 512 * MB} for n in range(2)})
    state = MemoryState({("pod1", "container1"): (Block((0, 1), MEMORY, GB), Block((0, 1), HP1G, GB))})
    m = p.machine(state)
    assert m[0].cells == (0, 1) and m[0].assignments == 2 and m[0].tables[MEMORY].free == 0
    after = p.machine(p.remove(state, "pod1", "container1"))
    assert after[0].cells == (0,) and after[1].cells == (1,)
    assert after[0].tables[MEMORY].free == 512 * MB and after[1].tables[HP1G].free == GB
    assert after[0].assignments == 0


def test_allocate_without_a_merged_hint_takes_the_best_own_hint() -> None:
    p = four_nodes()
    state = p.allocate(MemoryState(), "pod", "c", {MEMORY: GB, HP1G: GB}, None)
    assert state.get("pod", "c") == (Block((0,), HP1G, GB), Block((0,), MEMORY, GB))
    assert p.allocate(state, "pod", "c", {MEMORY: GB}, None) is state  # idempotent


def test_allocate_extends_a_hint_that_cannot_hold_the_request() -> None:
    p = four_nodes()
    state = p.allocate(MemoryState(), "pod", "c", {MEMORY: 2 * GB}, h([1], False))
    blocks = state.get("pod", "c")
    assert blocks == (Block((0, 1), MEMORY, 2 * GB),)
    m = p.machine(state)
    assert (m[0].tables[MEMORY].free, m[1].tables[MEMORY].free) == (0, 1024 * MB)
    wide = p.allocate(MemoryState(), "pod", "c", {MEMORY: 4 * GB}, h([1], True))
    assert wide.get("pod", "c") == (Block((0, 1, 2), MEMORY, 4 * GB),)  # narrowest preferred mask holding {1}


def test_single_and_cross_numa_allocations_never_mix() -> None:
    p = four_nodes()
    single = p.allocate(MemoryState(), "a", "c", {MEMORY: GB}, h([0], True))
    with pytest.raises(MemoryAllocationError, match="single- and cross-NUMA"):
        p.allocate(single, "b", "c", {MEMORY: GB}, h([0, 1], False))
    hints = p.hints(single, "b", "c", {MEMORY: 2 * GB})
    assert hints is not None and all(not (hint.affinity or 0) & 1 for hint in hints[MEMORY])
    cross = p.allocate(MemoryState(), "a", "c", {MEMORY: 2 * GB}, h([0, 1], False))
    with pytest.raises(MemoryAllocationError, match="single- and cross-NUMA"):
        p.allocate(cross, "b", "c", {MEMORY: GB}, h([1, 2], False))
    again = p.allocate(cross, "b", "c", {MEMORY: 512 * MB}, h([0, 1], False))  # same group: fine
    assert p.machine(again)[1].assignments == 2
    hints = p.hints(cross, "b", "c", {MEMORY: 512 * MB})
    assert hints is not None and h([0], True) not in set(hints[MEMORY])  # a grouped node is not offered alone


def test_no_room_anywhere() -> None:
    p = four_nodes()
    with pytest.raises(MemoryAllocationError, match="no NUMA nodes with enough memory"):
        p.allocate(MemoryState(), "pod", "c", {MEMORY: 100 * GB}, None)
    hints = p.hints(MemoryState(), "pod", "c", {MEMORY: 100 * GB})
    assert hints is not None and not list(hints[MEMORY])


def test_implicit_hints_match_the_explicit_walk() -> None:
    p = four_nodes()
    implicit = p.hints(MemoryState(), "pod", "c", {MEMORY: 2 * GB})
    assert implicit is not None
    assert set(implicit[MEMORY]) == {TopologyHint(m, m.bit_count() == 2) for m in range(1, 16) if m.bit_count() >= 2}


def test_reserved_memory_is_checked() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        StaticMemoryPolicy([NodeCapacity(0, GB)], {0: {MEMORY: 2 * GB}})
    with pytest.raises(ValueError, match="node"):
        StaticMemoryPolicy([NodeCapacity(0, GB)], {3: {MEMORY: MB}})
    with pytest.raises(ValueError, match="hugepages-2Mi"):
        StaticMemoryPolicy([NodeCapacity(0, GB)], {0: {HP2M: MB}})


def test_state_round_trip_and_names() -> None:
    state = MemoryState({("p", "c"): (Block((0, 1), MEMORY, GB),)})
    assert MemoryState.from_list(state.to_list()) == state
    with pytest.raises(ValueError, match="bad memory block"):
        MemoryState.from_list([{"pod": "p", "container": "c", "blocks": [{"numa": [], "type": "memory", "size": 1}]}])
    assert hugepage_resource(2 * MB) == HP2M and hugepage_resource(GB) == HP1G


def test_memory_only_nodes_join_mems_of_their_host() -> None:
    p = StaticMemoryPolicy([NodeCapacity(0, GB), NodeCapacity(1, GB)], attached={2: 1})
    assert p.expand((1,)) == (1, 2) and p.expand((0,)) == (0,)


def test_implicit_list_equals_the_kubelet_walk_in_used_states() -> None:
    """The implicit hint list against a literal port of ``calculateHints`` on many machine states."""
    import contextlib
    import itertools
    import random

    rng = random.Random(7)
    for _ in range(60):
        n = rng.randint(2, 5)
        p = StaticMemoryPolicy([NodeCapacity(i, 4 * GB, {HP2M: GB}) for i in range(n)], {})
        state = MemoryState()
        for k in range(rng.randint(0, 4)):
            size = rng.randint(1, 3)
            with contextlib.suppress(MemoryAllocationError):
                state = p.allocate(state, f"p{k}", "c", {MEMORY: size * GB}, None)
        req = {MEMORY: rng.randint(1, 9) * GB // 2}
        if rng.random() < 0.5:
            req[HP2M] = rng.randint(1, 3) * GB // 2
        m = p.machine(state)
        nodes = list(range(n))
        alloc_min = n
        expected = []
        for size in range(1, n + 1):
            for combo in itertools.combinations(nodes, size):
                if any(sum(m[i].tables[r].allocatable for i in combo) < v for r, v in req.items()):
                    continue
                alloc_min = min(alloc_min, size)
                if size == 1 and len(m[combo[0]].cells) > 1:
                    continue
                if size > 1 and any(m[i].assignments > 0 and (len(m[i].cells) == 1 or m[i].cells != combo)
                                    for i in combo):
                    continue
                if any(sum(m[i].tables[r].free for i in combo) < v for r, v in req.items()):
                    continue
                expected.append(mask_of(combo))
        got = p.hints(state, "new", "c", req)
        assert got is not None
        for r in req:
            assert {(x.affinity, x.preferred) for x in got[r]} == {(e, e.bit_count() == alloc_min) for e in expected}


def test_masks_within_is_the_set_of_hint_intersections() -> None:
    import contextlib
    import random

    rng = random.Random(11)
    for _ in range(40):
        n = rng.randint(2, 5)
        p = StaticMemoryPolicy([NodeCapacity(i, 4 * GB) for i in range(n)])
        state = MemoryState()
        for k in range(rng.randint(0, 3)):
            with contextlib.suppress(MemoryAllocationError):
                state = p.allocate(state, f"p{k}", "c", {MEMORY: rng.randint(1, 6) * GB}, None)
        hints = p.hints(state, "new", "c", {MEMORY: rng.randint(1, 8) * GB})
        assert hints is not None
        family = hints[MEMORY]
        masks = [x.affinity for x in family if x.affinity is not None]
        for within in range(1, 1 << n):
            for size in range(1, n + 1):
                want = sorted({m & within for m in masks if (m & within).bit_count() == size})
                assert list(family.masks_within(within, size)) == want  # type: ignore[attr-defined]
