"""Golden cases from the kubelet's cpu_assignment_test.go, run against our allocator."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import kube_topologies as kt
import pytest

from nri_pinner.engine.cpumanager.allocator import (
    take_by_topology,
    take_by_topology_numa_distributed,
    take_by_topology_numa_packed,
    take_by_topology_spread,
    take_by_topology_uncore,
)
from nri_pinner.engine.cpumanager.index import index_for
from nri_pinner.engine.cpumanager.packed import Accumulator
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.errors import InsufficientCPUs
from nri_pinner.engine.topology.model import Topology

S = CPUSet.parse
TopoFn = Callable[[], Topology]

# (description, topology, available, n, expected) shared by packed and distributed (group size 1)
COMMON = [
    ("zero cpus", kt.single_socket_ht, "0-7", 0, ""),
    ("one cpu", kt.single_socket_ht, "0-7", 1, "0"),
    ("one cpu, fills the partly used core", kt.single_socket_ht, "1,3,5,6,7", 1, "6"),
    ("two cpus", kt.single_socket_ht, "0-7", 2, "0,4"),
    ("all cpus", kt.single_socket_ht, "0-7", 8, "0-7"),
    ("two cpus, one whole core free", kt.single_socket_ht, "0-3,6", 2, "2,6"),
    ("a socket", kt.dual_socket_ht, "0-11", 6, "0,2,4,6,8,10"),
    ("a socket, multi NUMA per socket", kt.dual_socket_multi_numa_per_socket_ht, "0-79", 40, "0-19,40-59"),
    ("a NUMA node", kt.dual_socket_multi_numa_per_socket_ht, "0-79", 20, "0-9,40-49"),
    ("a NUMA node, NUMA 0 taken", kt.dual_socket_multi_numa_per_socket_ht, "10-39,50-79", 20, "10-19,50-59"),
    ("a socket and a NUMA node", kt.dual_socket_multi_numa_per_socket_ht, "0-79", 60, "0-29,40-69"),
    (
        "a socket and a NUMA node, core 0 taken",
        kt.dual_socket_multi_numa_per_socket_ht,
        "1-39,41-79",
        60,
        "10-39,50-79",
    ),
]

PACKED_ONLY = [
    ("one cpu, core from socket 0", kt.dual_socket_ht, "1-5,7-11", 1, "2"),
    ("4 cores: 3 fill NUMA 0, 1 from NUMA 1", kt.dual_socket_ht, "0-11", 8, "0,6,2,8,4,10,1,7"),
    (
        "32 cores: 3 NUMA nodes filled + 2 cores",
        kt.dual_socket_multi_numa_per_socket_ht,
        "0-79",
        64,
        "0-29,40-69,30,31,70,71",
    ),
]

UNCORE = [
    ("two full caches and a part of one", kt.uncore_single_socket_no_smt, "1-15", 10, "1,2,4-11"),
    # v1.32.10 takes no partial cache for less than a core (needed // threads = 0 cores), so the
    # packed answer stands; later kubelets round up and give "1".
    ("one cpu, dual socket HT (single cache)", kt.dual_socket_ht, "1-5,7-11", 1, "2"),
    ("first free cache of the first socket", kt.uncore_dual_socket_no_smt, "0-15", 4, "0-3"),
    ("all free caches of the first socket", kt.uncore_dual_socket_no_smt, "2-15", 6, "2-7"),
    ("first free cache of the second socket", kt.uncore_dual_socket_no_smt, "8-15", 4, "8-11"),
    ("first free cache of the free NUMA", kt.uncore_single_socket_multi_numa, "3,4-8,12", 2, "4,5"),
    ("best cache, SMT", kt.uncore_single_socket_smt, "2-3,10-11,4-7,12-15", 6, "4,5,6,12,13,14"),
    ("several caches, SMT", kt.uncore_single_socket_smt, "1-7,9-15", 10, "4-7,12-15,1,9"),
]

SPREAD = [
    ("3 of single socket HT", kt.single_socket_ht, "0-7", 3, "0,1,2"),
    ("2 of dual socket HT", kt.dual_socket_ht, "0-11", 2, "0,2"),
    ("3 of dual socket HT", kt.dual_socket_ht, "0-11", 3, "0,2,4"),
    ("6 of dual socket HT", kt.dual_socket_ht, "0-11", 6, "0,2,4,6,8,10"),
    ("8 of dual socket HT", kt.dual_socket_ht, "0-11", 8, "0,2,4,6,8,10,1,3"),
    ("2 of dual socket no HT", kt.dual_socket_no_ht, "0-7", 2, "0,1"),
    ("8 of multi NUMA per socket", kt.dual_socket_multi_numa_per_socket_ht, "0-79", 8, "0-7"),
    (
        "12 of quad socket four-way HT",
        kt.quad_socket_four_way_ht,
        "0-287",
        12,
        "0-2,9-10,13-14,21-22,25-26,33",
    ),
]

DISTRIBUTED = [  # (description, topology, available, n, group size, expected)
    ("4 cores, 2 per NUMA node", kt.dual_socket_ht, "0-11", 8, 1, "0,6,2,8,1,7,3,9"),
    (
        "32 cores, 8 per NUMA node",
        kt.dual_socket_multi_numa_per_socket_ht,
        "0-79",
        64,
        1,
        "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77",
    ),
    (
        "24 cores over the first 3 NUMA nodes",
        kt.dual_socket_multi_numa_per_socket_ht,
        "0-79",
        48,
        1,
        "0-7,10-17,20-27,40-47,50-57,60-67",
    ),
    (
        "24 cores, first NUMA node partly used",
        kt.dual_socket_multi_numa_per_socket_ht,
        "1-29,32-39,41-69,72-79",
        48,
        1,
        "1-8,10-17,20-27,41-48,50-57,60-67",
    ),
    (
        "24 cores over the last 3 NUMA nodes",
        kt.dual_socket_multi_numa_per_socket_ht,
        "2-29,31-39,42-69,71-79",
        48,
        1,
        "10-17,20-27,31-38,50-57,60-67,71-78",
    ),
    (
        "8 cores, 2 per NUMA node",
        kt.dual_socket_multi_numa_per_socket_ht,
        "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71",
        16,
        1,
        "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71",
    ),
    ("one cpu, core from socket 0", kt.dual_socket_ht, "1-5,7-11", 1, 1, "1"),
    ("one cpu, group size 2 falls back to packed", kt.dual_socket_ht, "1-5,7-11", 1, 2, "2"),
    (
        "13 cores over the first 2 NUMA nodes",
        kt.dual_socket_multi_numa_per_socket_ht,
        "0-79",
        26,
        1,
        "0-6,10-16,40-45,50-55",
    ),
    (
        "13 cores over the first 2 NUMA nodes, group 2",
        kt.dual_socket_multi_numa_per_socket_ht,
        "0-79",
        26,
        2,
        "0-6,10-15,40-46,50-55",
    ),
    (
        "31 cores, 1 spills to NUMA 0 and 1",
        kt.dual_socket_multi_numa_per_socket_ht,
        "0-79",
        62,
        1,
        "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76",
    ),
    (
        "31 cores, group 2 spills to NUMA 0, 1, 2",
        kt.dual_socket_multi_numa_per_socket_ht,
        "0-79",
        62,
        2,
        "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76",
    ),
    (
        "31 cores, spill to NUMA 2, 3 to keep balance",
        kt.dual_socket_multi_numa_per_socket_ht,
        "0-8,10-18,20-39,40-48,50-58,60-79",
        62,
        1,
        "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77",
    ),
    (
        "31 cores, group 2, spill to NUMA 0, 2, 3",
        kt.dual_socket_multi_numa_per_socket_ht,
        "0-8,10-18,20-39,40-48,50-58,60-79",
        62,
        2,
        "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77",
    ),
    (
        "remainder only on NUMA nodes that can take it",
        kt.dual_socket_multi_numa_per_socket_ht,
        "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76",
        34,
        1,
        "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74",
    ),
    (
        "failure once seen on a live machine",
        kt.dual_socket_multi_numa_per_socket_ht_large,
        "0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,101-111,229-239,126,127,254,255",
        28,
        1,
        "43-47,75-79,96,101-105,171-174,203-206,229-232",
    ),
]


def _ids(cases: Sequence[tuple[object, ...]]) -> list[str]:
    return [str(c[0]) for c in cases]


@pytest.mark.parametrize(
    ("desc", "topo", "avail", "n", "want"), COMMON + PACKED_ONLY, ids=_ids(COMMON + PACKED_ONLY)
)
def test_packed(desc: str, topo: TopoFn, avail: str, n: int, want: str) -> None:
    assert take_by_topology_numa_packed(topo(), S(avail), n) == S(want)


@pytest.mark.parametrize(("desc", "topo", "avail", "n", "want"), UNCORE, ids=_ids(UNCORE))
def test_packed_prefer_uncore(desc: str, topo: TopoFn, avail: str, n: int, want: str) -> None:
    assert take_by_topology_uncore(topo(), S(avail), n) == S(want)


@pytest.mark.parametrize(("desc", "topo", "avail", "n", "want"), SPREAD, ids=_ids(SPREAD))
def test_spread(desc: str, topo: TopoFn, avail: str, n: int, want: str) -> None:
    assert take_by_topology_spread(topo(), S(avail), n) == S(want)
    assert take_by_topology(topo(), S(avail), n, distribute_cpus_across_cores=True) == S(want)


@pytest.mark.parametrize(("desc", "topo", "avail", "n", "want"), COMMON, ids=_ids(COMMON))
def test_distributed_common(desc: str, topo: TopoFn, avail: str, n: int, want: str) -> None:
    assert take_by_topology_numa_distributed(topo(), S(avail), n) == S(want)


@pytest.mark.parametrize(("desc", "topo", "avail", "n", "group", "want"), DISTRIBUTED, ids=_ids(DISTRIBUTED))
def test_distributed(desc: str, topo: TopoFn, avail: str, n: int, group: int, want: str) -> None:
    assert take_by_topology_numa_distributed(topo(), S(avail), n, cpu_group_size=group) == S(want)


@pytest.mark.parametrize(
    "fn",
    [
        take_by_topology_numa_packed,
        take_by_topology_numa_distributed,
        take_by_topology_spread,
        take_by_topology_uncore,
    ],
)
def test_not_enough_cpus(fn: Callable[[Topology, CPUSet, int], CPUSet]) -> None:
    with pytest.raises(InsufficientCPUs) as err:
        fn(kt.single_socket_ht(), S("0,2,4,6"), 5)
    assert str(err.value) == "not enough cpus available to satisfy request: requested=5, available=4"
    assert err.value.reason == "InsufficientCPUs"


def test_bad_input_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="not online CPUs"):
        take_by_topology_numa_packed(kt.single_socket_ht(), S("0-8"), 1)
    with pytest.raises(ValueError, match="negative"):
        take_by_topology_numa_packed(kt.single_socket_ht(), S("0-7"), -1)
    offline = kt.regular(1, 1, 4, 2, offline=[3])
    with pytest.raises(ValueError, match="not online"):
        take_by_topology_numa_packed(offline, S("3"), 1)


def test_distributed_option_dispatch_uses_core_size_as_group() -> None:
    got = take_by_topology(
        kt.dual_socket_multi_numa_per_socket_ht(),
        S("0-79"),
        26,
        distribute_cpus_across_numa=True,
        full_pcpus_only=True,
    )
    assert got == S("0-6,10-15,40-46,50-55")


# --- the accumulator's orders (TestCPUAccumulatorFree*) --------------------------------------------
def _acc(topo: Topology, avail: str) -> Accumulator:
    return Accumulator(index_for(topo), S(avail).mask, 0)


def _free(acc: Accumulator, ids: list[int], masks: dict[int, int], size: Callable[[int], int]) -> list[int]:
    return [i for i in ids if (masks[i] & acc.free).bit_count() == size(i)]


@pytest.mark.parametrize(
    ("topo", "avail", "numas", "sockets"),
    [
        (kt.single_socket_ht, "0-7", [0], [0]),
        (kt.single_socket_ht, "1-7", [], []),
        (kt.dual_socket_ht, "0-11", [0, 1], [0, 1]),
        (kt.dual_socket_ht, "0-9,11", [1], [1]),
        (kt.dual_socket_ht, "0,2-9,11", [], []),
        (kt.dual_socket_multi_numa_per_socket_ht, "0-79", [0, 1, 2, 3], [0, 1]),
        (kt.dual_socket_multi_numa_per_socket_ht, "1-79", [1, 2, 3], [1]),
        (kt.dual_socket_multi_numa_per_socket_ht, "1-9,11-79", [2, 3], [1]),
        (kt.dual_socket_multi_numa_per_socket_ht, "1-59,61-79", [1, 3], []),
        (kt.dual_socket_multi_numa_per_socket_ht, "1-9,11-59,61-78", [], []),
        (kt.fake_multi_socket_dual_socket_per_numa_ht, "0-79", [0, 1], [0, 1, 2, 3]),
        (kt.fake_multi_socket_dual_socket_per_numa_ht, "0-19,21-79", [0], [0, 1, 3]),
        (kt.fake_multi_socket_dual_socket_per_numa_ht, "0-9,11-79", [1], [0, 2, 3]),
        (kt.fake_multi_socket_dual_socket_per_numa_ht, "1-19,21-38,41-60,61-78", [], [1]),
    ],
)
def test_free_numa_nodes_and_sockets(topo: TopoFn, avail: str, numas: list[int], sockets: list[int]) -> None:
    acc = _acc(topo(), avail)
    idx = acc.idx
    assert _free(acc, acc.sorted_numas(), idx.numa_mask, lambda n: idx.numa_mask[n].bit_count()) == numas
    assert (
        sorted(_free(acc, acc.sorted_sockets(), idx.socket_mask, lambda _s: idx.cpus_per_socket)) == sockets
    )


@pytest.mark.parametrize(
    ("topo", "avail", "cores"),
    [
        (kt.single_socket_ht, "0-7", [0, 1, 2, 3]),
        (kt.single_socket_ht, "0-2,4-6", [0, 1, 2]),
        (kt.single_socket_ht, "0-6", [0, 1, 2]),
        (kt.single_socket_ht, "0-3", []),
        (kt.dual_socket_ht, "0-11", [0, 2, 4, 1, 3, 5]),
        (kt.dual_socket_ht, "1-5,7-11", [2, 4, 1, 3, 5]),
        (kt.dual_socket_ht, "2-5,8-11", [2, 4, 3, 5]),
    ],
)
def test_free_cores_order(topo: TopoFn, avail: str, cores: list[int]) -> None:
    # upstream names a core by its kubelet CoreID (its lowest CPU on these topologies)
    acc = _acc(topo(), avail)
    free = _free(acc, acc.sorted_cores(), acc.idx.core_mask, lambda _c: acc.idx.cpus_per_core)
    assert [CPUSet.from_mask(acc.idx.core_mask[c]).min() for c in free] == cores


@pytest.mark.parametrize(
    ("topo", "avail", "order"),
    [
        (kt.single_socket_ht, "0-7", [0, 4, 1, 5, 2, 6, 3, 7]),
        (kt.single_socket_ht, "3-7", [4, 5, 6, 3, 7]),
        (kt.dual_socket_ht, "0-11", [0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
        (kt.dual_socket_ht, "1-11", [6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
        (kt.dual_socket_ht, "1-5,7-11", [2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
        (kt.triple_socket_ht, "0-3,6-13", [12, 13, 0, 1, 2, 3, 6, 7, 8, 9, 10, 11]),
    ],
)
def test_free_cpus_order(topo: TopoFn, avail: str, order: list[int]) -> None:
    # taking every available CPU one thread at a time visits them in the kubelet's freeCPUs order
    acc = _acc(topo(), avail)
    seen: list[int] = []
    for core in acc.sorted_cores():
        seen.extend(CPUSet.from_mask(acc.idx.core_mask[core] & acc.free))
    assert seen == order


def test_index_is_cached_per_topology() -> None:
    topo = kt.dual_socket_ht()
    assert index_for(topo) is index_for(topo)
    assert index_for(kt.dual_socket_ht()) is not index_for(topo)
