"""Up-set (device-rule) hints held implicitly merge exactly like their full lists: against the kubelet's naive
cross-product merge (tests/engine/naive_merge.py) on small machines, and against the same merge given
the spelled-out lists up to 16 NUMA nodes, with CPU hints, explicit hints and each other."""
# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kube_topologies as kt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from naive_merge import naive_cpu_hints
from test_merge_properties import check_all_policies, distances, machines, providers, to_fast

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topologymanager.cpu_hints import cpu_topology_hints
from nri_pinner.engine.topologymanager.hints import TopologyHint, mask_of
from nri_pinner.engine.topologymanager.merge import Policy, TopologyManager, merge
from nri_pinner.engine.topologymanager.upset_hints import UpSetHints


@st.composite
def upsets(draw: st.DrawFn, nodes: list[int], max_count: int = 2) -> list[tuple[Any, Any]]:
    """(fast, naive) answers: each an up-set over ``nodes`` with a random non-empty required part."""
    out = []
    for i in range(draw(st.integers(1, max_count))):
        required = mask_of(draw(st.sets(st.sampled_from(nodes), min_size=1, max_size=min(3, len(nodes)))))
        hints = UpSetHints(mask_of(nodes), required)
        out.append(({f"u{i}": hints}, {f"u{i}": [(h.affinity, h.preferred) for h in hints]}))
    return out


def test_up_set_lists_the_kubelet_device_hints() -> None:
    hints = UpSetHints(0b1111, 0b0100)
    listed = list(hints)
    assert len(listed) == len(hints) == 8 and listed[0] == TopologyHint(0b0100, True)
    assert {h.affinity for h in listed} == {m for m in range(1, 16) if m & 0b0100}
    assert all(h in hints for h in listed) and TopologyHint(0b0110, True) not in hints
    assert TopologyHint(0b0011, False) not in hints and hints[1] == listed[1]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_up_sets_with_cpu_and_explicit_hints_equal_naive(data: st.DataObject) -> None:
    topo = data.draw(machines(max_numa=4))  # the oracle walks the full cross product: keep it small
    nodes = list(topo.numa_nodes)
    available = CPUSet(data.draw(st.sets(st.sampled_from(topo.all_cpus.sorted()))))
    request = data.draw(st.integers(1, len(topo.all_cpus) + 1))
    fast_in: list[Any] = []
    naive_in: list[Any] = []
    if data.draw(st.booleans()):
        fast_in.append({"cpu": cpu_topology_hints(topo, available, CPUSet(), request)})
        naive_in.append({"cpu": naive_cpu_hints(topo, available, CPUSet(), request)})
    for fast, naive in data.draw(upsets(nodes)):
        position = data.draw(st.integers(0, len(fast_in)))
        fast_in.insert(position, fast)
        naive_in.insert(position, naive)
    for answer in data.draw(providers(len(nodes), max_providers=2, max_hints=3)):
        position = data.draw(st.integers(0, len(fast_in)))
        fast_in.insert(position, to_fast(answer))
        naive_in.insert(position, answer)
    check_all_policies(nodes, fast_in, naive_in, data.draw(distances(max(nodes) + 2)))


def check_implicit_equals_listed(nodes: list[int], answers: list[Any], dist: dict[tuple[int, int], int],
                                 policies: tuple[str, ...] = ("best-effort", "restricted", "single-numa-node")) -> None:
    """The same merge with every up-set spelled out as its full list (the explicit path, itself checked
    against the naive merge in test_merge_properties)."""
    listed = [{k: tuple(v) if isinstance(v, UpSetHints) else v for k, v in a.items()} if a else a for a in answers]
    distance: Callable[[int, int], int] = lambda a, b: dist[(a, b)]  # noqa: E731
    for policy in policies:
        for closest in (False, True):
            manager = TopologyManager(Policy(policy), tuple(nodes), closest, distance)
            fast, slow = merge(manager, answers), merge(manager, listed)
            assert (fast.hint, fast.admit) == (slow.hint, slow.admit), f"{policy} closest={closest}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_up_sets_equal_their_lists_up_to_ten_numa_nodes(data: st.DataObject) -> None:
    topo = data.draw(machines(max_numa=10))
    nodes = list(topo.numa_nodes)
    available = CPUSet(data.draw(st.sets(st.sampled_from(topo.all_cpus.sorted()))))
    request = data.draw(st.integers(1, len(topo.all_cpus) + 1))
    answers: list[Any] = [{"cpu": cpu_topology_hints(topo, available, CPUSet(), request)}]
    answers += [fast for fast, _ in data.draw(upsets(nodes))]
    answers += [to_fast(a) for a in data.draw(providers(len(nodes), max_providers=2, max_hints=3))]
    answers = data.draw(st.permutations(answers))
    check_implicit_equals_listed(nodes, answers, data.draw(distances(max(nodes) + 2)))


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_sixteen_numa_nodes_nic_and_gpu(data: st.DataObject) -> None:
    topo = kt.regular(2, 8, 1, 1)
    available = CPUSet(data.draw(st.sets(st.sampled_from(topo.all_cpus.sorted()))))
    fast_cpu = cpu_topology_hints(topo, available, CPUSet(), data.draw(st.integers(1, 8)))
    required = mask_of(data.draw(st.sets(st.sampled_from(topo.numa_nodes), min_size=1, max_size=2)))
    nic = UpSetHints(mask_of(topo.numa_nodes), required)
    gpu = data.draw(st.sampled_from(topo.numa_nodes))
    check_implicit_equals_listed(list(topo.numa_nodes),
                                 [{"cpu": fast_cpu}, {"nics": nic}, {"gpu": [TopologyHint(1 << gpu, True)]}],
                                 data.draw(distances(16)), policies=("best-effort", "single-numa-node"))
