"""Property tests: the fast engine gives the kubelet's answer (the naive oracle's) on random inputs.

Compared for every policy, with and without prefer-closest-numa-nodes: merged
hint (affinity and preferred) and admit/reject. Inputs: random machines up to
8 NUMA nodes, random free/reusable sets and options, random extra providers
(nil / empty map / nil or empty resource / explicit hints, incl. any-node
hints and masks naming absent nodes); plus a few 16-node cases small enough
for the oracle's 65,535-mask walk.
"""
# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import kube_topologies as kt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from naive_merge import Hint, ProviderHints, naive_cpu_hints, naive_merge

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import Topology
from nri_pinner.engine.topologymanager.cpu_hints import cpu_topology_hints
from nri_pinner.engine.topologymanager.hints import ResourceHints, TopologyHint
from nri_pinner.engine.topologymanager.merge import Policy, TopologyManager, merge

POLICIES = [p.value for p in Policy]
Distances = dict[tuple[int, int], int]


@st.composite
def machines(draw: st.DrawFn, max_numa: int = 8) -> Topology:
    sockets = draw(st.integers(1, 2))
    numa_per_socket = draw(st.integers(1, max_numa // sockets))
    cores = draw(st.integers(1, 3))
    threads = draw(st.integers(1, 2))
    total = sockets * numa_per_socket * cores * threads
    offline = draw(st.sets(st.integers(1, total - 1), max_size=2)) if total > 1 else set()
    return kt.regular(sockets, numa_per_socket, cores, threads, offline=offline)


@st.composite
def cpu_requests(draw: st.DrawFn, topo: Topology) -> dict[str, Any]:
    cpus = topo.all_cpus.sorted()
    available = CPUSet(draw(st.sets(st.sampled_from(cpus))))
    others = [c for c in cpus if c not in available]
    reusable = CPUSet(draw(st.sets(st.sampled_from(others), max_size=2))) if others and draw(
        st.booleans()) else CPUSet()
    return {
        "available": available, "reusable": reusable,
        "request": draw(st.integers(1, len(cpus) + 1)),
        "full_pcpus_only": draw(st.booleans()), "align_by_socket": draw(st.booleans()),
    }


@st.composite
def providers(draw: st.DrawFn, numa: int, max_providers: int = 3, max_hints: int = 5) -> list[ProviderHints]:
    out: list[ProviderHints] = []
    for _ in range(draw(st.integers(0, max_providers))):
        kind = draw(st.sampled_from(["hints", "hints", "hints", "nil", "empty-map"]))
        if kind == "nil":
            out.append(None)
            continue
        if kind == "empty-map":
            out.append({})
            continue
        answer: dict[str, list[Hint] | None] = {}
        for r in range(draw(st.integers(1, 2))):
            shape = draw(st.sampled_from(["list", "list", "list", "nil", "empty"]))
            if shape == "nil":
                answer[f"r{r}"] = None
            elif shape == "empty":
                answer[f"r{r}"] = []
            else:
                # one bit above the machine's nodes now and then: the kubelet ANDs it away
                mask = st.integers(1, (1 << (numa + 1)) - 1) if draw(st.booleans()) else st.integers(
                    1, (1 << numa) - 1)
                hint = st.tuples(st.one_of(st.none(), mask) if draw(st.booleans()) else mask, st.booleans())
                answer[f"r{r}"] = draw(st.lists(hint, min_size=1, max_size=max_hints))
        out.append(answer)
    return out


@st.composite
def distances(draw: st.DrawFn, numa: int) -> Distances:
    off = st.sampled_from([11, 12, 20, 21, 30, 32])
    return {(a, b): 10 if a == b else draw(off) for a in range(numa) for b in range(numa)}


def to_fast(answer: ProviderHints) -> ResourceHints | None:
    if answer is None:
        return None
    return {k: None if v is None else [TopologyHint(m, pr) for m, pr in v] for k, v in answer.items()}


def check_all_policies(nodes: Sequence[int], fast_in: list[ResourceHints | None], naive_in: list[ProviderHints],
                       dist: Distances, policies: Sequence[str] = POLICIES) -> None:
    distance: Callable[[int, int], int] = lambda a, b: dist[(a, b)]  # noqa: E731
    for policy in policies:
        for closest in (False, True):
            result = merge(TopologyManager(Policy(policy), tuple(nodes), closest, distance), fast_in)
            (mask, preferred), admit = naive_merge(policy, nodes, naive_in, prefer_closest=closest,
                                                   distance=distance)
            got = (result.hint.affinity, result.hint.preferred, result.admit)
            assert got == (mask, preferred, admit), f"{policy} closest={closest}"
            assert (result.error is None) == result.admit


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_cpu_hints_and_merge_equal_naive(data: st.DataObject) -> None:
    topo = data.draw(machines())
    req = data.draw(cpu_requests(topo))
    opts = {"full_pcpus_only": req["full_pcpus_only"], "align_by_socket": req["align_by_socket"]}
    fast_cpu = cpu_topology_hints(topo, req["available"], req["reusable"], req["request"], **opts)
    naive_cpu = naive_cpu_hints(topo, req["available"], req["reusable"], req["request"], **opts)
    assert [(h.affinity, h.preferred) for h in fast_cpu] == naive_cpu

    numa = len(topo.numa_nodes)
    extra = data.draw(providers(numa))
    fast_in = [to_fast(a) for a in extra]
    naive_in = list(extra)
    if data.draw(st.booleans()):  # a second CPU-like implicit source takes the fallback path
        second_free = CPUSet(data.draw(st.sets(st.sampled_from(topo.all_cpus.sorted()))))
        fast_in.append({"cpu2": cpu_topology_hints(topo, second_free, CPUSet(), 1)})
        naive_in.append({"cpu2": naive_cpu_hints(topo, second_free, CPUSet(), 1)})
    position = data.draw(st.integers(0, len(fast_in)))
    fast_in.insert(position, {"cpu": fast_cpu})
    naive_in.insert(position, {"cpu": naive_cpu})
    check_all_policies(topo.numa_nodes, fast_in, naive_in, data.draw(distances(numa)))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_explicit_hints_merge_equal_naive(data: st.DataObject) -> None:
    numa = data.draw(st.integers(1, 16))
    extra = data.draw(providers(numa, max_providers=4, max_hints=4))
    check_all_policies(list(range(numa)), [to_fast(a) for a in extra], extra, data.draw(distances(numa)))


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_sixteen_numa_nodes_equal_naive(data: st.DataObject) -> None:
    """2 sockets x 8 NUMA x 1 core: the oracle walks all 65,535 masks and the full product."""
    topo = kt.regular(2, 8, 1, 1)
    cpus = topo.all_cpus.sorted()
    available = CPUSet(data.draw(st.sets(st.sampled_from(cpus))))
    request = data.draw(st.integers(1, 17))
    align = data.draw(st.booleans())
    fast_cpu = cpu_topology_hints(topo, available, CPUSet(), request, align_by_socket=align)
    naive_cpu = naive_cpu_hints(topo, available, CPUSet(), request, align_by_socket=align)
    assert [(h.affinity, h.preferred) for h in fast_cpu] == naive_cpu
    extra = data.draw(providers(16, max_providers=2, max_hints=2))
    # best-effort and restricted merge the same way, so the oracle's slow walk runs for two policies
    policy = data.draw(st.sampled_from(["best-effort", "restricted"]))
    check_all_policies(topo.numa_nodes, [*map(to_fast, extra), {"cpu": fast_cpu}],
                       [*extra, {"cpu": naive_cpu}], data.draw(distances(16)),
                       policies=[policy, "single-numa-node"])
