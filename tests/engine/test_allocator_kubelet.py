# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)
"""The allocator against the kubelet v1.32.10 answers of issue 21, and against a line-by-line
port of cpu_assignment.go (naive_alloc) on random regular topologies.

Kubelet answers: computed by the real kubelet code (issue 21's differential corpus); the
topologies are the kubelet's named test topologies (kube_topologies).
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import kube_topologies as kt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from naive_alloc import details_of, naive_distributed, naive_packed

from nri_pinner.cli.simulate import run_scenario_file
from nri_pinner.engine.cpumanager.allocator import (
    take_by_topology,
    take_by_topology_numa_distributed,
    take_by_topology_numa_packed,
    take_by_topology_spread,
    take_by_topology_uncore,
)
from nri_pinner.engine.cpumanager.distributed import _go_combinations
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import CPUInfo, Topology

S = CPUSet.parse


def test_packed_quad_socket_orders_cores_by_kubelet_core_id() -> None:
    # CPU 7 is in core 70, CPU 55 in core 6: equally free cores go by core id, not by CPU id.
    topo = kt.quad_socket_four_way_ht()
    taken = S("0-1,14,27,32,37,53,58,64,69,82,89,101,117,119-120,128,132,135,145,173,187,196,"
              "201,205,215,220,222,224,232,248,274,282-283")
    got = take_by_topology_numa_packed(topo, topo.online - taken, 9)
    assert got == S("55-56,85,115-116,175-176,235-236")


def _one_l3_four_numa() -> Topology:
    return Topology(cpus=tuple(CPUInfo(cpu=c, socket=0, core=c // 2, numa=c // 8, l3=0) for c in range(32)))


def test_uncore_remainder_finishes_the_partly_used_core() -> None:
    # v1.32's partial-cache rule (1.34+ answers "0-2": test_allocator_kubelet_134.py)
    topo = _one_l3_four_numa()
    assert take_by_topology_uncore(topo, topo.online - S("6,8-15"), 3, odd_smt_uncore=False) == S("0-1,7")


def test_uncore_remainder_through_simulate() -> None:
    # the same machine and taken CPUs as a scenario file (taken = strictly reserved; kubelet_version 1.32)
    out = io.StringIO()
    assert run_scenario_file(str(Path(__file__).parent / "scenarios" / "uncore-remainder.json"), None, out) == 0
    assert json.loads(out.getvalue())["cpus"] == "0-1,7"


def test_uncore_partial_cache_needs_exact_whole_cores() -> None:
    # 4 CPUs = 2 whole cores of the first cache with free CPUs: taken as a partial cache.
    topo = _one_l3_four_numa()
    assert take_by_topology_uncore(topo, topo.online - S("6,8-15"), 4) == S("0-3")


def test_distributed_large_uses_the_combination_go_slices_leave_behind() -> None:
    topo = kt.dual_socket_multi_numa_per_socket_ht_large()
    got = take_by_topology(topo, topo.online, 168, full_pcpus_only=True, distribute_cpus_across_numa=True)
    assert got == S("0-13,16-29,32-45,48-61,64-77,112-125,128-141,144-157,160-173,176-189,192-205,240-253")


def test_go_combinations_alias_like_append() -> None:
    views = list(_go_combinations([0, 1, 2, 3, 4, 5, 6, 7], 6))
    assert [v.values() for v in views[:1]] == [(0, 1, 2, 3, 4, 7)]  # overwritten by (0..4, 6), (0..4, 7)
    assert views[-1].values() == (2, 3, 4, 5, 6, 7)
    assert len(views) == 28


# -- random regular topologies: the bitmask allocator equals the line-by-line port ----------


@st.composite
def machines(draw: st.DrawFn) -> Topology:
    sockets = draw(st.integers(1, 3))
    numa_per_socket = draw(st.integers(1, 3))
    sockets_per_numa = draw(st.sampled_from([1, 1, 2])) if numa_per_socket == 1 else 1
    numas = sockets * numa_per_socket // sockets_per_numa if sockets % sockets_per_numa == 0 else sockets
    if numas * sockets_per_numa != sockets * numa_per_socket:
        sockets_per_numa = 1
        numas = sockets * numa_per_socket
    cores_per_numa = draw(st.integers(1, 4)) * sockets_per_numa
    threads = draw(st.sampled_from([1, 2, 2, 4]))
    # caches inside one NUMA node: the kubelet lists a cache spanning nodes once per node
    # and takes it twice (a known kubelet fault we deliberately do not copy)
    cores_per_l3 = draw(st.sampled_from([d for d in (1, 2, cores_per_numa) if cores_per_numa % d == 0]))
    total_cores = numas * cores_per_numa
    seed = draw(st.integers(0, 2**16))
    numbering = draw(st.sampled_from(["linux", "adjacent", "shuffled"]))
    rng = random.Random(seed)
    cpu_ids = list(range(total_cores * threads))
    if numbering == "shuffled":
        rng.shuffle(cpu_ids)
    per_socket_cores = total_cores // sockets
    core_ids = list(range(per_socket_cores))
    if draw(st.booleans()):
        rng.shuffle(core_ids)  # core ids that do not follow CPU numbering
    cpus = []
    for core in range(total_cores):
        numa = core // cores_per_numa
        socket = core // per_socket_cores
        for t in range(threads):
            slot = core + t * total_cores if numbering != "adjacent" else core * threads + t
            cpus.append(CPUInfo(cpu=cpu_ids[slot], socket=socket, core=core_ids[core % per_socket_cores],
                                numa=numa, l3=core // cores_per_l3))
    return Topology(cpus=tuple(cpus))


@st.composite
def requests(draw: st.DrawFn) -> tuple[Topology, CPUSet, int]:
    topo = draw(machines())
    cpus = list(topo.online)
    avail = CPUSet(c for c in cpus if draw(st.integers(0, 3)) > 0) if draw(st.booleans()) else topo.online
    n = draw(st.integers(0, len(avail)))
    return topo, avail, n


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(requests())
def test_packed_equals_kubelet_port(req: tuple[Topology, CPUSet, int]) -> None:
    topo, avail, n = req
    want = naive_packed(details_of(topo), set(avail), n)
    assert take_by_topology_numa_packed(topo, avail, n) == CPUSet(want)


@PROPS
@given(requests())
def test_spread_equals_kubelet_port(req: tuple[Topology, CPUSet, int]) -> None:
    topo, avail, n = req
    want = naive_packed(details_of(topo), set(avail), n, spread=True)
    assert take_by_topology_spread(topo, avail, n) == CPUSet(want)


@PROPS
@given(requests())
def test_uncore_equals_kubelet_port(req: tuple[Topology, CPUSet, int]) -> None:
    topo, avail, n = req
    want = naive_packed(details_of(topo), set(avail), n, uncore=True)
    assert take_by_topology_uncore(topo, avail, n, odd_smt_uncore=False) == CPUSet(want)


@PROPS
@given(requests(), st.sampled_from([1, 2]))
def test_distributed_equals_kubelet_port(req: tuple[Topology, CPUSet, int], group: int) -> None:
    topo, avail, n = req
    try:
        want = naive_distributed(details_of(topo), set(avail), n, group)
    except RuntimeError:  # the kubelet fails or hangs here; we answer (checked elsewhere)
        return
    assert take_by_topology_numa_distributed(topo, avail, n, cpu_group_size=group) == CPUSet(want)
