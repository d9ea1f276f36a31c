"""CPU topology hints: the kubelet's generateCPUTopologyHints rules on named topologies."""

from __future__ import annotations

import kube_topologies as kt
import pytest
from naive_merge import naive_cpu_hints

from nri_pinner.engine.cpuset import EMPTY, CPUSet
from nri_pinner.engine.topologymanager.cpu_hints import CPUHintProvider, CPUTopologyHints, cpu_topology_hints
from nri_pinner.engine.topologymanager.hints import HintRequest, TopologyHint, mask_of

T, F = True, False


def hints(result: CPUTopologyHints) -> list[tuple[list[int], bool]]:
    return [([n for n in range(64) if h.affinity is not None and h.affinity >> n & 1], h.preferred)
            for h in result]


def test_dual_socket_ht_request_fits_one_node() -> None:
    topo = kt.dual_socket_ht()  # NUMA 0 = even CPUs, NUMA 1 = odd CPUs, 6 each
    for request in (1, 6):
        got = cpu_topology_hints(topo, topo.all_cpus, EMPTY, request)
        assert hints(got) == [([0], T), ([1], T), ([0, 1], F)]


def test_dual_socket_ht_request_needs_both_nodes() -> None:
    topo = kt.dual_socket_ht()
    assert hints(cpu_topology_hints(topo, topo.all_cpus, EMPTY, 7)) == [([0, 1], T)]
    assert hints(cpu_topology_hints(topo, topo.all_cpus, EMPTY, 12)) == [([0, 1], T)]


def test_used_node_drops_out_but_min_affinity_counts_all_cpus() -> None:
    topo = kt.dual_socket_ht()
    available = CPUSet.parse("0,1,3,5,7,9,11")  # NUMA 0 has one free CPU
    got = cpu_topology_hints(topo, available, EMPTY, 2)
    assert hints(got) == [([1], T), ([0, 1], F)]
    assert hints(cpu_topology_hints(topo, available, EMPTY, 6)) == [([1], T), ([0, 1], F)]
    # 3 CPUs fit one NUMA node by size, so {0,1} is not preferred even though it is the only hint.
    assert hints(cpu_topology_hints(topo, CPUSet.parse("0,1,3"), EMPTY, 3)) == [([0, 1], F)]


def test_no_hint_when_too_few_cpus() -> None:
    topo = kt.dual_socket_ht()
    got = cpu_topology_hints(topo, CPUSet.parse("0-3"), EMPTY, 5)
    assert list(got) == [] and not got and len(got) == 0
    assert got.narrowest_count is None


def test_reusable_cpus_pin_their_node() -> None:
    topo = kt.dual_socket_ht()
    # CPU 2 (NUMA 0) is reusable: every hint must contain NUMA 0.
    got = cpu_topology_hints(topo, CPUSet.parse("1,3,5,7,9,11"), CPUSet.parse("2"), 2)
    assert hints(got) == [([0, 1], F)]
    got = cpu_topology_hints(topo, CPUSet.parse("0,1,3"), CPUSet.parse("2"), 2)
    assert hints(got) == [([0], T), ([0, 1], F)]


def test_align_by_socket_prefers_socket_aligned_masks() -> None:
    # 80 CPUs: sockets hold NUMA {0,1} and {2,3}; 10 cores x 2 threads per NUMA node.
    topo = kt.dual_socket_multi_numa_per_socket_ht()
    plain = cpu_topology_hints(topo, topo.all_cpus, EMPTY, 2)
    aligned = cpu_topology_hints(topo, topo.all_cpus, EMPTY, 2, align_by_socket=True)
    preferred_plain = {h.affinity for h in plain if h.preferred}
    preferred_aligned = {h.affinity for h in aligned if h.preferred}
    singles = {mask_of([n]) for n in range(4)}
    assert preferred_plain == singles
    assert preferred_aligned == singles | {mask_of([0, 1]), mask_of([2, 3])}
    assert len(aligned) == len(plain) == 15


def test_full_pcpus_only_counts_whole_free_cores() -> None:
    topo = kt.dual_socket_ht()  # NUMA 0 cores: {0,6}, {2,8}, {4,10}
    available = topo.all_cpus - CPUSet.parse("0")  # core {0,6} is half used
    assert hints(cpu_topology_hints(topo, available, EMPTY, 5)) == [([0], T), ([1], T), ([0, 1], F)]
    whole = cpu_topology_hints(topo, available, EMPTY, 5, full_pcpus_only=True)
    assert hints(whole) == [([1], T), ([0, 1], F)]


def test_offline_cpus_do_not_count() -> None:
    topo = kt.regular(1, 2, 2, 1, offline=[3])  # NUMA 0 = {0,1}, NUMA 1 = {2} (+ offline 3)
    got = cpu_topology_hints(topo, CPUSet.parse("0-2"), EMPTY, 2)
    # NUMA 1 holds one online CPU, so 2 CPUs fit only NUMA 0.
    assert hints(got) == [([0], T), ([0, 1], F)]


def test_sequence_protocol_matches_the_kubelet_list() -> None:
    topo = kt.dual_socket_multi_numa_per_socket_ht()
    available = CPUSet.parse("0-9,40-49,25,31,65")
    got = cpu_topology_hints(topo, available, EMPTY, 12)
    expected = [TopologyHint(m, pr) for m, pr in naive_cpu_hints(topo, available, EMPTY, 12)]
    assert list(got) == expected
    assert len(got) == len(expected) and got[0] == expected[0] and list(got[1:3]) == expected[1:3]
    assert got.narrowest_count == 1 and bool(got)


def test_masks_within_is_the_projection_of_the_hint_up_set() -> None:
    topo = kt.regular(2, 2, 2, 1)  # 4 NUMA nodes of 2 CPUs
    got = cpu_topology_hints(topo, CPUSet.parse("0,2,3,5,6,7"), CPUSet.parse("1"), 3)
    every = [h.affinity for h in got]
    assert every  # sanity: the case has hints
    for within in range(1, 16):
        for size in range(1, 5):
            expected = sorted({m & within for m in every if m is not None and (m & within).bit_count() == size})
            assert list(got.masks_within(within, size)) == expected
            assert got.first_within(within, size) == (expected[0] if expected else None)


def test_first_within_is_the_lowest_projection_on_uneven_nodes() -> None:
    """first_within (the merge's shortcut for one node to add) against the up-set's projection,
    on nodes of different free counts, with and without a reusable CPU pinning a node."""
    topo = kt.regular(1, 6, 3, 1)  # 6 NUMA nodes of 3 CPUs
    available = CPUSet.parse("0,3-4,6-8,12,15-16")  # free per node: 1, 2, 3, 0, 1, 2
    for reusable in (EMPTY, CPUSet.parse("10")):
        for request in range(1, 8):
            got = cpu_topology_hints(topo, available, reusable, request)
            every = [h.affinity for h in got if h.affinity is not None]
            for within in range(1, 64):
                for size in range(0, 7):
                    expected = sorted({m & within for m in every if (m & within).bit_count() == size})
                    assert got.first_within(within, size) == (expected[0] if expected and size else None), \
                        (reusable, request, within, size)


def test_errors() -> None:
    topo = kt.dual_socket_ht()
    with pytest.raises(ValueError, match="must be >= 1"):
        cpu_topology_hints(topo, topo.all_cpus, EMPTY, 0)
    with pytest.raises(ValueError, match="not in the topology"):
        cpu_topology_hints(topo, CPUSet.parse("0,99"), EMPTY, 1)


def test_provider() -> None:
    topo = kt.dual_socket_ht()
    provider = CPUHintProvider(topo, lambda: CPUSet.parse("1,3,5"))
    assert provider.name == "cpu"
    assert provider.hints(HintRequest("pod", "shared", exclusive_cpus=0)) is None
    answer = provider.hints(HintRequest("pod", "c", exclusive_cpus=2))
    assert answer is not None
    assert [(h.affinity, h.preferred) for h in answer["cpu"] or ()] == [(0b10, True), (0b11, False)]
    # already holding CPUs (e.g. after a restart): hints come from them, not from the free set
    held = provider.hints(HintRequest("pod", "c", exclusive_cpus=2, allocated_cpus=CPUSet.parse("0,2")))
    assert held is not None and [h.affinity for h in held["cpu"] or ()] == [0b01, 0b11]
    wrong = provider.hints(HintRequest("pod", "c", exclusive_cpus=2, allocated_cpus=CPUSet.parse("0")))
    assert wrong == {"cpu": ()}
