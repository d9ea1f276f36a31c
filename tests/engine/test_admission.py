"""The engine facade (hints → merge → static policy) on the kubelet's named topologies.

Each test builds the engine the way the service does (``Engine.from_settings`` on a
config mapping with the TOML keys) and checks the decision a pod author would see.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kube_topologies as kt
import pytest

from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import AdmissionRequest, Decision, Engine
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.cpuset import EMPTY, CPUSet
from nri_pinner.engine.errors import PolicyOptionError
from nri_pinner.engine.topology.model import CPUInfo, Topology
from nri_pinner.engine.topologymanager.hints import mask_of, parse_static_hints

TM_POLICIES = ["none", "best-effort", "restricted", "single-numa-node"]
ALIGNING = ["best-effort", "restricted", "single-numa-node"]
SCOPES = ["container", "pod"]


def engine(topo: Topology, cpu: Mapping[str, Any] | None = None, tm: Mapping[str, Any] | None = None) -> Engine:
    return Engine.from_settings(from_mapping({"cpu_manager": dict(cpu or {}), "topology_manager": dict(tm or {})}),
                                topo)


def gpu_on(*nodes: int, preferred: bool = True) -> dict[str, Any]:
    return dict(parse_static_hints({"vendor.com/gpu": [{"numa": [n], "preferred": preferred} for n in nodes]}))


def req(pod: str, container: str, cpus: float, qos: str = "guaranteed", **kw: Any) -> AdmissionRequest:
    milli = int(cpus * 1000)
    return AdmissionRequest(pod, container, qos, milli, milli, **kw)


def admit(e: Engine, state: EngineState, r: AdmissionRequest) -> tuple[EngineState, Decision]:
    new, d = e.admit(state, r)
    if d.admitted:
        assert d.shared == e.policy.shared_pool(new)
        if d.exclusive:
            assert d.cpus.isdisjoint(d.shared)
            assert d.mems == tuple(e.topology.numa_of(d.cpus))
    else:
        assert new is state, "a rejection must leave the state untouched"
        assert d.cpus == EMPTY and d.mems == () and d.reason and d.message
    return new, d


# -- device hints steer exclusive CPUs ---------------------------------------------------------


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("policy", ALIGNING)
def test_gpu_on_numa1_pulls_cpus_and_mems_to_numa1(policy: str, scope: str) -> None:
    topo = kt.dual_socket_ht()  # NUMA 1 = odd CPUs
    e = engine(topo, tm={"policy": policy, "scope": scope})
    _, d = admit(e, e.initial_state(), req("p", "c", 2, hints=gpu_on(1)))
    assert d.admitted and d.exclusive and len(d.cpus) == 2
    assert d.cpus.issubset(topo.numa_cpus[1])
    assert d.mems == (1,)
    assert d.hint is not None and d.hint.affinity == mask_of([1]) and d.hint.preferred


def test_policy_none_ignores_device_hints() -> None:
    topo = kt.dual_socket_ht()
    e = engine(topo)
    state = e.initial_state()
    _, d = admit(e, state, req("p", "c", 2, hints=gpu_on(1)))
    _, plain = e.policy.allocate(state, "p", "c", 2000, 2000, "Guaranteed")
    assert d.hint is None and d.cpus == plain.cpus
    assert not d.cpus.issubset(topo.numa_cpus[1])  # the static policy alone starts on NUMA 0


def test_hint_follows_the_device_node() -> None:
    topo = kt.dual_socket_multi_numa_per_socket_ht()
    e = engine(topo, tm={"policy": "single-numa-node"})
    state = e.initial_state()
    for node in topo.numa_nodes:
        state, d = admit(e, state, req(f"p{node}", "c", 4, hints=gpu_on(node)))
        assert d.cpus.issubset(topo.numa_cpus[node]) and d.mems == (node,)


def test_prefer_closest_numa_nodes_is_passed_through() -> None:
    # 4 NUMA nodes of 2 CPUs; node 2 is much closer to node 0 than node 1 is.
    near = {0: {0: 10, 1: 30, 2: 11, 3: 30}, 1: {0: 30, 1: 10, 2: 30, 3: 11},
            2: {0: 11, 1: 30, 2: 10, 3: 30}, 3: {0: 30, 1: 11, 2: 30, 3: 10}}
    topo = Topology(cpus=tuple(CPUInfo(cpu=c, socket=0, core=c, numa=c // 2, l3=0) for c in range(8)),
                    numa_distances=near)
    plain = engine(topo, tm={"policy": "best-effort"})
    closest = engine(topo, tm={"policy": "best-effort", "policy_options": ["prefer-closest-numa-nodes"]})
    _, d_plain = admit(plain, plain.initial_state(), req("p", "c", 4))
    _, d_close = admit(closest, closest.initial_state(), req("p", "c", 4))
    assert d_plain.hint is not None and d_plain.hint.affinity == mask_of([0, 1])
    assert d_close.hint is not None and d_close.hint.affinity == mask_of([0, 2])
    assert d_close.mems == (0, 2)


# -- rejections ------------------------------------------------------------------------------


def test_restricted_rejects_what_best_effort_admits_unaligned() -> None:
    topo = kt.dual_socket_ht()  # 6 CPUs per NUMA node: 8 cannot sit next to a NUMA-1 GPU alone
    r = req("p", "c", 8, hints=gpu_on(1))
    best = engine(topo, tm={"policy": "best-effort"})
    _, d = admit(best, best.initial_state(), r)
    assert d.admitted and len(d.cpus) == 8 and d.hint is not None and not d.hint.preferred
    for policy in ("restricted", "single-numa-node"):
        e = engine(topo, tm={"policy": policy})
        _, d = admit(e, e.initial_state(), r)
        assert not d.admitted and d.reason == "TopologyAffinityError"
        assert d.shared == e.initial_state().default_set
        assert d.to_json()["reason"] == "TopologyAffinityError"


def test_single_numa_node_admits_a_full_node_but_not_more() -> None:
    topo = kt.dual_socket_ht()
    e = engine(topo, tm={"policy": "single-numa-node"})
    state, d = admit(e, e.initial_state(), req("p", "c", 6))
    assert d.admitted and d.cpus in (topo.numa_cpus[0], topo.numa_cpus[1])
    _, d = admit(e, state, req("q", "c", 7))
    assert not d.admitted and d.reason == "TopologyAffinityError"


def test_single_numa_node_container_vs_pod_scope() -> None:
    # two 4-CPU containers fit one NUMA node each, but the pod's 8 do not fit any single node
    topo = kt.dual_socket_ht()
    container = engine(topo, tm={"policy": "single-numa-node", "scope": "container"})
    state = container.initial_state()
    for name in ("a", "b"):
        state, d = admit(container, state, req("p", name, 4, pod_exclusive_cpus=8))
        assert d.admitted and len(topo.numa_of(d.cpus)) == 1
    pod = engine(topo, tm={"policy": "single-numa-node", "scope": "pod"})
    _, d = admit(pod, pod.initial_state(), req("p", "a", 4, pod_exclusive_cpus=8))
    assert not d.admitted and d.reason == "TopologyAffinityError"


def test_pod_scope_places_every_container_on_the_pod_hint() -> None:
    topo = kt.dual_socket_multi_numa_per_socket_ht()  # 20 CPUs per NUMA node
    e = engine(topo, tm={"policy": "restricted", "scope": "pod"})
    state = e.initial_state()
    state, first = admit(e, state, req("p", "a", 4, hints=gpu_on(2), pod_exclusive_cpus=10))
    state, second = admit(e, state, req("p", "b", 6))
    assert first.hint is not None and first.hint.affinity == mask_of([2])
    assert (first.cpus | second.cpus).issubset(topo.numa_cpus[2]) and first.cpus.isdisjoint(second.cpus)
    recorded = state.get("p", "b")
    assert recorded is not None and recorded.numa_affinity == mask_of([2])


def test_full_pcpus_only_rejects_odd_requests_on_ht() -> None:
    topo = kt.dual_socket_ht()
    for policy in TM_POLICIES:
        e = engine(topo, cpu={"policy_options": ["full-pcpus-only"]}, tm={"policy": policy})
        state, d = admit(e, e.initial_state(), req("p", "c", 3))
        assert not d.admitted and d.reason == "SMTAlignmentError", policy
        _, d = admit(e, state, req("p", "c", 4))
        assert d.admitted and all(topo.siblings(c).issubset(d.cpus) for c in d.cpus)


def test_no_smt_check_without_ht() -> None:
    e = engine(kt.dual_socket_no_ht(), cpu={"policy_options": ["full-pcpus-only"]})
    _, d = admit(e, e.initial_state(), req("p", "c", 3))
    assert d.admitted and len(d.cpus) == 3


@pytest.mark.parametrize("policy", ["none", "best-effort"])
def test_insufficient_cpus(policy: str) -> None:
    topo = kt.dual_socket_ht()
    e = engine(topo, cpu={"reserved_cpu_count": 2}, tm={"policy": policy})
    state, d = admit(e, e.initial_state(), req("p", "big", 10))
    assert d.admitted
    _, d = admit(e, state, req("q", "c", 1))
    assert not d.admitted and d.reason == "InsufficientCPUs"
    assert d.shared == topo.all_cpus - state.exclusive_cpus()


# -- pools: reserved, isolated, offline --------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True])
def test_reserved_by_count_is_never_exclusive(strict: bool) -> None:
    topo = kt.dual_socket_ht()
    options = ["strict-cpu-reservation"] if strict else []
    e = engine(topo, cpu={"reserved_cpu_count": 2, "policy_options": options})
    reserved = topo.siblings(0)  # the kubelet reserves whole cores from the lowest one
    assert e.policy.reserved == reserved
    state = e.initial_state()
    assert reserved.isdisjoint(state.default_set) if strict else reserved.issubset(state.default_set)
    state, d = admit(e, state, req("p", "c", len(topo.all_cpus) - len(reserved)))
    assert d.admitted and d.cpus == topo.all_cpus - reserved
    assert d.shared == (EMPTY if strict else reserved)


def test_reserved_by_list() -> None:
    topo = kt.dual_socket_ht()
    e = engine(topo, cpu={"reserved_cpus": "1,7", "policy_options": ["strict-cpu-reservation"]})
    state, d = admit(e, e.initial_state(), req("p", "c", 10))
    assert d.cpus == topo.all_cpus - CPUSet.parse("1,7") and d.shared == EMPTY
    _, shared = admit(e, state, req("q", "c", 0.5))
    assert shared.admitted and not shared.exclusive and shared.cpus == EMPTY


def test_isolated_cpus_exclusive_first() -> None:
    topo = kt.regular(1, 2, 4, 2, isolated=[5, 13])  # 16 CPUs; 5 and 13 are siblings on NUMA 1
    e = engine(topo, cpu={"isolated_cpus": "exclusive-first"})
    state = e.initial_state()
    assert state.default_set == topo.online - topo.isolated
    state, d = admit(e, state, req("p", "c", 2))
    assert d.cpus == topo.isolated
    _, d = admit(e, state, req("q", "c", 1))
    assert d.cpus.isdisjoint(topo.isolated) and d.shared.isdisjoint(topo.isolated)


def test_isolated_cpus_unused_are_never_handed_out() -> None:
    topo = kt.regular(1, 2, 4, 2, isolated=[5, 13])
    e = engine(topo, cpu={"isolated_cpus": "unused", "reserved_cpus": "0"})
    state, d = admit(e, e.initial_state(), req("p", "c", 13))
    assert d.admitted and d.cpus == topo.online - topo.isolated - CPUSet([0])
    _, d = admit(e, state, req("q", "c", 1))
    assert not d.admitted and d.reason == "InsufficientCPUs"
    state = e.remove(state, "p", "c")
    assert state.default_set == topo.online - topo.isolated


def test_without_reserved_cpus_the_shared_pool_never_empties() -> None:
    # the kubelet requires reserved CPUs for the static policy; without any, the last shared CPU stays shared
    topo = kt.regular(1, 1, 2, 1)
    e = engine(topo)
    state, d = admit(e, e.initial_state(), req("p", "c", 1))
    assert d.admitted and len(d.shared) == 1
    after, d = admit(e, state, req("q", "c", 1))
    assert not d.admitted and d.reason == "InsufficientCPUs" and "shared pool empty" in d.message
    assert after == state


def test_offline_cpus_are_in_no_pool() -> None:
    topo = kt.regular(1, 2, 4, 2, offline=[3, 11], isolated=[4])
    e = engine(topo, cpu={"reserved_cpu_count": 1}, tm={"policy": "best-effort"})
    state = e.initial_state()
    offline = topo.all_cpus - topo.online
    assert state.default_set.isdisjoint(offline)
    free = len(topo.online) - len(e.policy.reserved)  # isolated CPU 4 is usable (exclusive-first)
    state, d = admit(e, state, req("p", "c", free))
    assert d.admitted and d.cpus.isdisjoint(offline) and d.cpus.isdisjoint(e.policy.reserved)
    assert d.cpus | d.shared == topo.online


# -- configuration the kubelet refuses ---------------------------------------------------------


@pytest.mark.parametrize(("topo", "cpu", "tm", "words"), [
    (kt.dual_socket_ht(), {"policy_options": ["align-by-socket"]}, {"policy": "single-numa-node"},
     "single-numa-node"),
    (kt.dual_socket_ht(), {"policy_options": ["full-pcpus-only", "distribute-cpus-across-cores"]}, {},
     "full-pcpus-only"),
    (kt.dual_socket_ht(), {"policy_options": ["prefer-align-cpus-by-uncorecache", "distribute-cpus-across-numa"]},
     {}, "prefer-align-cpus-by-uncorecache"),
    (kt.fake_multi_socket_dual_socket_per_numa_ht(), {"policy_options": ["align-by-socket"]}, {}, "outnumber"),
    (kt.dual_socket_ht(), {"reserved_cpu_count": 13}, {}, "reserve"),
    (kt.regular(1, 1, 4, 1, offline=[3]), {"reserved_cpus": "3"}, {}, "not online"),
    (kt.regular(1, 1, 4, 1, isolated=[2]), {"reserved_cpus": "2"}, {}, "isolated"),
])
def test_refused_option_combinations(topo: Topology, cpu: dict[str, Any], tm: dict[str, Any], words: str) -> None:
    with pytest.raises(PolicyOptionError, match=words):
        engine(topo, cpu=cpu, tm=tm)


def test_align_by_socket_with_restricted_is_accepted() -> None:
    topo = kt.dual_socket_multi_numa_per_socket_ht()  # 2 NUMA nodes per socket
    e = engine(topo, cpu={"policy_options": ["align-by-socket"]}, tm={"policy": "restricted"})
    _, d = admit(e, e.initial_state(), req("p", "c", 30))
    assert d.admitted and d.hint is not None and d.hint.preferred
    assert len({topo.by_cpu[c].socket for c in d.cpus}) == 1


# -- container life cycle ----------------------------------------------------------------------


@pytest.mark.parametrize("policy", TM_POLICIES)
def test_app_container_reuses_init_container_cpus(policy: str) -> None:
    topo = kt.dual_socket_ht()
    e = engine(topo, tm={"policy": policy})
    state, init = admit(e, e.initial_state(), req("p", "init", 4, init=True))
    state, app = admit(e, state, req("p", "app", 4))
    assert app.cpus == init.cpus
    state, other = admit(e, state, req("q", "app", 4))
    assert other.cpus.isdisjoint(app.cpus)
    state = e.remove(e.remove(state, "p", "init"), "p", "app")
    assert state.default_set == topo.all_cpus - other.cpus


def test_restartable_init_container_keeps_its_cpus() -> None:
    e = engine(kt.dual_socket_ht(), tm={"policy": "best-effort"})
    state, sidecar = admit(e, e.initial_state(), req("p", "sidecar", 2, init=True, restartable=True))
    _, app = admit(e, state, req("p", "app", 2))
    assert app.cpus.isdisjoint(sidecar.cpus)


def test_readmitting_a_container_returns_its_cpus() -> None:
    e = engine(kt.dual_socket_ht(), tm={"policy": "restricted"})
    state, first = admit(e, e.initial_state(), req("p", "c", 2, hints=gpu_on(1)))
    again_state, again = admit(e, state, req("p", "c", 2, hints=gpu_on(1)))
    assert again.cpus == first.cpus and again_state.to_dict() == state.to_dict()


@pytest.mark.parametrize(("qos", "cpus"), [("burstable", 2), ("besteffort", 0), ("guaranteed", 1.5),
                                           ("unmanaged", 0)])
def test_shared_containers_follow_the_pool(qos: str, cpus: float) -> None:
    topo = kt.dual_socket_ht()
    e = engine(topo, cpu={"reserved_cpu_count": 2}, tm={"policy": "single-numa-node"})
    state, pinned = admit(e, e.initial_state(), req("p", "pinned", 2))
    state, d = admit(e, state, req("q", "c", cpus, qos=qos))
    assert d.admitted and not d.exclusive and d.cpus == d.shared == topo.all_cpus - pinned.cpus
    assert d.mems == (0, 1)


def test_remove_of_unknown_container_is_a_no_op() -> None:
    e = engine(kt.dual_socket_ht())
    state = e.initial_state()
    assert e.remove(state, "nope", "c") is state


def test_decision_json_shape() -> None:
    e = engine(kt.dual_socket_ht(), tm={"policy": "single-numa-node"})
    state, ok = admit(e, e.initial_state(), req("p", "c", 2, hints=gpu_on(1)))
    doc = ok.to_json()
    assert doc == {"pod": "p", "container": "c", "admitted": True, "exclusive": True, "cpus": str(ok.cpus),
                   "mems": "1", "shared": str(ok.shared), "hint": {"numa": [1], "preferred": True}}
    _, bad = admit(e, state, req("q", "c", 7))
    assert {"reason", "message"} <= set(bad.to_json()) and bad.to_json()["cpus"] == ""


def test_bad_requests_and_scopes_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown QoS"):
        AdmissionRequest("p", "c", "gold")
    e = engine(kt.dual_socket_ht())
    with pytest.raises(ValueError, match="scope"):
        Engine(e.topology, e.policy, e.manager, scope="node")
