# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)
"""Pod scope as the kubelet does it (issue 44, item 5): one merge per pod, its hint for every container.

Kubelet v1.32.10 (vendored in kubeedge/kubeedge, vendor/k8s.io/kubernetes/pkg/kubelet/cm/):
topologymanager/scope_pod.go ``Admit`` merges the pod's hints once (:48), refuses the pod when the
merge does not admit (:50-53), then sets that best hint for each container in turn and allocates it
(:55-57, an allocation error refuses the pod: :59-63); scope.go ``RemoveContainer`` drops the pod's
entry with its last container (:129-132). cpumanager/policy_static.go ``getAlignedCPUs`` with
align-by-socket aligns to the hint's sockets (:726-731), so a container's CPUs can sit outside the
hint's NUMA nodes; merging the pod's hints again for a later container (``GetPodTopologyHints``,
:578-634, counts the pod's CPUs as reusable, every one of which a hint must hold) then drifts.

Upstream tests ported (kubernetes/kubernetes, read with the search tool; facts and expectations
carried over): topologymanager/scope_pod_test.go @ 0ba0191f ``TestPodCalculateAffinity`` (:27) and
``TestPodAccumulateProvidersHints`` (:145) — every provider's pod hints are collected once and handed
to one merge; scope_test.go @ 008b3652 ``TestGetAffinity`` (:27, a pod never admitted has no hint)
and ``TestRemoveContainer`` (:85, a pod's hints go with its container). The pod-level CPU total and
``GetPodTopologyHints`` cases of cpumanager/topology_hints_test.go are in test_known_pod.py, the
align-by-socket case of policy_static_test.go in test_static_policy.py (``test_align_by_socket``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kube_topologies as kt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubelet_sequences import engines, run, sequences
from naive_kubelet import KContainer, KPod, Kubelet
from test_admission import admit, engine, gpu_on, req

from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.cpumanager.state import Assignment, EngineState
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import CPUInfo, Topology
from nri_pinner.engine.topologymanager.hints import TopologyHint, mask_of
from nri_pinner.engine.topologymanager.pod_scope import recorded_hint

S = CPUSet.parse
OPTIONS = ["align-by-socket", "distribute-cpus-across-numa"]
RESERVED = "20,66,71,79,87"


def four_sockets() -> Topology:
    """128 CPUs: CPU c is core c mod 64 of socket c mod 4, SMT sibling c + 64; NUMA node
    2·socket + (1 if core ≥ 32): 8 nodes of 8 cores."""
    return Topology(tuple(CPUInfo(cpu=c, socket=c % 4, core=c % 64, numa=2 * (c % 4) + (c % 64 >= 32), l3=c % 4)
                          for c in range(128)))


def big(policy: str, scope: str = "pod") -> Engine:
    return engine(four_sockets(), {"reserved_cpus": RESERVED, "policy_options": OPTIONS},
                  {"policy": policy, "scope": scope})


def pod_req(pod: KPod, c: KContainer) -> AdmissionRequest:
    return req(pod.uid, c.name, c.cpus, init=c.init, restartable=c.restartable,
               pod_exclusive_cpus=pod.pod_guaranteed_cpus())


def admit_all(e: Engine, s: EngineState, pod: KPod) -> tuple[EngineState, list[Any]]:
    out = []
    for c in pod.containers:
        s, d = admit(e, s, pod_req(pod, c))
        out.append(d)
    return s, out


SIDECAR_POD = KPod("p", (KContainer("log", 10, init=True, restartable=True),
                         KContainer("proxy", 16, init=True, restartable=True),
                         KContainer("app0", 2), KContainer("app1", 2)))


def _sidecars_admitted(e: Engine) -> EngineState:
    s, q = admit(e, e.initial_state(), pod_req(KPod("q", (KContainer("app", 2),)), KContainer("app", 2)))
    assert q.cpus == S("32,96")  # the earlier pod
    for c in SIDECAR_POD.containers[:2]:
        s, d = admit(e, s, pod_req(SIDECAR_POD, c))
        assert d.admitted
    return s


# -- the example, and restricted --------------------------------------------------------------


def test_sidecars_then_apps_get_the_kubelets_cpus() -> None:
    """The pod's hint {0,2} is merged once and is every container's: the apps get 0,64 and 36,100 as
    under the kubelet. Before issue 44 each container merged again, the sidecars' CPUs (on nodes 1 and
    3 by align-by-socket) counted as reusable, and the apps got 21,85 and 25,89 on hint {2,3}."""
    e = big("best-effort")
    s, q = admit(e, e.initial_state(), pod_req(KPod("q", (KContainer("app", 2),)), KContainer("app", 2)))
    assert q.cpus == S("32,96")
    s, got = admit_all(e, s, SIDECAR_POD)
    assert [d.cpus for d in got] == [S("1,5,9,13,17,65,69,73,77,81"),
                                     S("33,37,41,45,49,53,57,61,97,101,105,109,113,117,121,125"),
                                     S("0,64"), S("36,100")]
    assert {d.hint for d in got} == {TopologyHint(mask_of([0, 2]), True)} and s.pod_hints["p"] == got[0].hint
    kubelet = Kubelet(e.topology, e.policy.reserved, e.policy.options, "best-effort", "pod")
    kubelet.admit(KPod("q", (KContainer("app", 2),)))
    assert [o.cpus for o in kubelet.admit(SIDECAR_POD)] == [d.cpus for d in got]  # the port agrees


def test_restricted_admits_the_pod_the_kubelet_admits() -> None:
    """Same machine and options under restricted: the kubelet admits p on {3,5}; merging again for
    app0 (the sidecars' CPUs on nodes 3, 4 and 5) gave the non-preferred {3,4,5}, refused with
    TopologyAffinityError before issue 44."""
    e = big("restricted")
    kubelet = Kubelet(e.topology, e.policy.reserved, e.policy.options, "restricted", "pod")
    pods = [KPod("q0", (KContainer("app", 8),)), KPod("q1", (KContainer("app", 16),)),
            KPod("p", (KContainer("sc0", 20, init=True, restartable=True),
                       KContainer("sc1", 8, init=True, restartable=True), KContainer("a0", 2), KContainer("a1", 2)))]
    s = e.initial_state()
    for pod in pods:
        s, got = admit_all(e, s, pod)
        theirs = kubelet.admit(pod)
        assert all(d.admitted for d in got) and [d.cpus for d in got] == [o.cpus for o in theirs]
    assert [d.cpus for d in got[2:]] == [S("22,86"), S("53,117")]
    assert {d.hint for d in got} == {TopologyHint(mask_of([3, 5]), True)}


# -- lifecycle -------------------------------------------------------------------------------------------

DUAL = {"reserved_cpus": "0"}  # kt.dual_socket_ht: NUMA 0 = even CPUs, NUMA 1 = odd


def test_the_hint_is_kept_until_the_pods_last_record_goes() -> None:
    """scope_test.go TestGetAffinity (:27): no hint for a pod not admitted; TestRemoveContainer (:85)
    and scope.go:129-132: the pod's hint goes with its last container, not before."""
    e = engine(kt.dual_socket_ht(), DUAL, {"policy": "restricted", "scope": "pod"})
    s = e.initial_state()
    assert "p" not in s.pod_hints
    s, a = admit(e, s, req("p", "a", 2, pod_exclusive_cpus=3))
    s, b = admit(e, s, req("p", "b", 0.5, pod_exclusive_cpus=3))  # shared: it has a record too
    assert s.pod_hints["p"] == a.hint == b.hint and a.hint is not None and a.hint.affinity == 0b01
    s = e.remove(s, "p", "a")
    assert s.pod_hints["p"] == a.hint
    s = e.remove(s, "p", "b")
    assert "p" not in s.pod_hints and not s.assignments and s.default_set == e.initial_state().default_set


def test_later_containers_are_not_asked_again() -> None:
    """scope_pod_test.go TestPodAccumulateProvidersHints (:145) / TestPodCalculateAffinity (:27): each
    provider's pod hints are collected once, for one merge. A later container's own hints (here a
    device on the other node) are not asked: it gets the pod's hint."""
    e = engine(kt.dual_socket_ht(), DUAL, {"policy": "restricted", "scope": "pod"})
    s, first = admit(e, e.initial_state(), req("p", "a", 2, hints=gpu_on(1), pod_exclusive_cpus=4))
    assert set(first.provider_hints) == {"cpu", "static"} and first.hint == TopologyHint(0b10, True)
    s, later = admit(e, s, req("p", "b", 2, hints=gpu_on(0), pod_exclusive_cpus=4))
    assert later.admitted and later.hint == first.hint and not later.provider_hints
    assert e.mems_of(later.cpus) == (1,)


def test_a_refused_pod_keeps_no_hint_and_each_create_meets_the_same_refusal() -> None:
    """scope_pod.go:50-53: a merge that does not admit refuses the whole pod. Under NRI each create of
    the pod is refused alike while the node is unchanged, and none leaves a hint; once CPUs free up the
    next create is the pod's admission."""
    e = engine(kt.dual_socket_ht(), DUAL, {"policy": "restricted", "scope": "pod"})
    s, _ = admit(e, e.initial_state(), req("q", "app", 1, hints=gpu_on(1), pod_exclusive_cpus=1))
    assert len(e.policy.available_for_exclusive(s)) == 10  # 5 on each node, 6 asked
    for name in ("a", "b", "a"):
        after, d = admit(e, s, req("p", name, 3, pod_exclusive_cpus=6))
        assert not d.admitted and d.reason == "TopologyAffinityError" and after is s
    s = e.remove(s, "q", "app")
    s, b = admit(e, s, req("p", "b", 3, pod_exclusive_cpus=6))
    s, a = admit(e, s, req("p", "a", 3, pod_exclusive_cpus=6))
    assert a.admitted and a.hint == b.hint == s.pod_hints["p"] and (a.cpus | b.cpus) == S("1,3,5,7,9,11")


def test_a_refused_allocation_keeps_no_hint() -> None:
    """scope_pod.go:59-63: an allocation error refuses the pod; the state (and so the hint) is left as it was."""
    e = engine(kt.dual_socket_ht(), {"reserved_cpus": "0", "policy_options": ["full-pcpus-only"]},
               {"policy": "best-effort", "scope": "pod"})
    s = e.initial_state()
    after, odd = admit(e, s, req("p", "a", 1, pod_exclusive_cpus=3))
    assert not odd.admitted and odd.reason == "SMTAlignmentError" and "p" not in after.pod_hints


def test_a_container_admitted_again_is_checked_and_leaves_the_pods_hint() -> None:
    """A container holding CPUs, created again, is checked as the kubelet re-admits a pod (a merge of the
    pod as it stands, test_readmission.py): another size refused under restricted; the pod's hint stays."""
    e = engine(kt.dual_socket_ht(), DUAL, {"policy": "restricted", "scope": "pod"})
    s, a = admit(e, e.initial_state(), req("p", "a", 2, pod_exclusive_cpus=4))
    s, b = admit(e, s, req("p", "b", 2, pod_exclusive_cpus=4))
    assert b.hint == a.hint == s.pod_hints["p"]
    again_state, again = admit(e, s, req("p", "a", 2, pod_exclusive_cpus=4))
    assert again.admitted and again.cpus == a.cpus and again_state.pod_hints == s.pod_hints
    after, bigger = admit(e, s, req("p", "a", 4, pod_exclusive_cpus=6))
    assert not bigger.admitted and bigger.reason == "TopologyAffinityError" and after is s


def test_container_scope_keeps_no_pod_hint() -> None:
    e = big("best-effort", scope="container")
    s, got = admit_all(e, _sidecars_admitted(big("best-effort", scope="container")), SIDECAR_POD)
    assert all(d.admitted for d in got) and not s.pod_hints


# -- after a restart: the records ----------------------------------------------------------------------


def _rebuilt(s: EngineState, e: Engine, affinity: bool = True) -> EngineState:
    """The state as a plugin restart rebuilds it: the records from the checkpoint, no pod hints."""
    out = e.initial_state()
    for a in s.assignments.values():
        a = Assignment.from_dict(a.to_dict())
        out = out.hold(a if affinity else replace(a, numa_affinity=None))
    return out.with_reusable_recomputed()


def test_a_restart_recovers_the_hint_from_the_records() -> None:
    """The pod hints are not in the service's checkpoint, the records' NUMA affinities are: in pod
    scope every container was admitted with the pod's hint, so after a restart the apps still get
    the kubelet's 0,64 and 36,100 (the preferred flag is not recorded: best-effort takes it as not
    preferred), and the recovered hint is kept for the pod's next containers."""
    e = big("best-effort")
    s = _rebuilt(_sidecars_admitted(e), e)
    assert not s.pod_hints
    s, app0 = admit(e, s, pod_req(SIDECAR_POD, SIDECAR_POD.containers[2]))
    s, app1 = admit(e, s, pod_req(SIDECAR_POD, SIDECAR_POD.containers[3]))
    assert (app0.cpus, app1.cpus) == (S("0,64"), S("36,100"))
    assert app0.hint == app1.hint == s.pod_hints["p"] == TopologyHint(mask_of([0, 2]), False)


def test_a_restart_without_recorded_affinities_merges_the_pod_again() -> None:
    """Records without an affinity (adopted from the runtime without a checkpoint): the fallback merges
    the pod's hints again for the pod as it stands, as the kubelet re-admits a pod after its own restart
    (it checkpoints no hints either), once; here that is the drift the records otherwise avoid."""
    e = big("best-effort")
    s = _rebuilt(_sidecars_admitted(e), e, affinity=False)
    s, app0 = admit(e, s, pod_req(SIDECAR_POD, SIDECAR_POD.containers[2]))
    s, app1 = admit(e, s, pod_req(SIDECAR_POD, SIDECAR_POD.containers[3]))
    assert (app0.cpus, app1.cpus) == (S("21,85"), S("25,89"))
    assert app0.hint == app1.hint == s.pod_hints["p"] and app0.hint is not None and app0.hint.affinity == 0b1100


def test_records_that_do_not_agree_give_no_hint() -> None:
    e = engine(kt.dual_socket_ht(), DUAL, {"policy": "single-numa-node", "scope": "pod"})

    def held(*masks: int | None) -> EngineState:
        s = e.initial_state()
        for i, m in enumerate(masks):
            s = s.hold(Assignment("p", f"c{i}", S(str(1 + 2 * i)), S(str(1 + 2 * i)), True, numa_affinity=m))
        return s

    assert recorded_hint(held(0b10, 0b10), "p", e.manager) == TopologyHint(0b10, True)
    assert recorded_hint(held(0b10, 0b01), "p", e.manager) is None  # disagree (a scope change)
    assert recorded_hint(held(0b10, None), "p", e.manager) is None  # one adopted without affinity
    assert recorded_hint(held(0b11), "p", e.manager) is None  # never a single-numa-node hint
    assert recorded_hint(held(0b100), "p", e.manager) is None  # no such node


def test_a_placement_without_the_pods_totals_is_not_remembered() -> None:
    """A rebuild places containers with requests that carry no pod totals: their merge is their own."""
    e = engine(kt.dual_socket_ht(), DUAL, {"policy": "restricted", "scope": "pod"})
    s, d = admit(e, e.initial_state(), req("p", "a", 2))
    assert d.admitted and not s.pod_hints


def test_the_state_keeps_pod_hints_through_json_and_start() -> None:
    e = engine(kt.dual_socket_ht(), DUAL, {"policy": "restricted", "scope": "pod"})
    s, _ = admit(e, e.initial_state(), req("p", "a", 2, pod_exclusive_cpus=2))
    s, _ = admit(e, s, req("q", "a", 1, pod_exclusive_cpus=1))
    assert EngineState.from_dict(s.to_dict()) == s
    assert s.to_dict()["pod_hints"]["p"] == {"numa": [0], "preferred": True}
    gone = s.with_changes(drop=("q", "a"))  # a record lost outside the engine: start drops its hint
    started, _ = e.policy.start(gone)
    assert started.pod_hints == {"p": s.pod_hints["p"]}
    with pytest.raises(ValueError, match="pod hint"):
        EngineState.from_dict({**s.to_dict(), "pod_hints": {"p": {"numa": []}}})


# -- back to back against the kubelet port, where align-by-socket leaves the hint's nodes ----------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(["best-effort", "restricted"]), full_pcpus=st.booleans(),
       reserved=st.integers(1, 2), seq=sequences())
def test_back_to_back_by_socket_the_kubelets_answers(policy: str, full_pcpus: bool, reserved: int,
                                                     seq: tuple[list[KPod], list[tuple[str, int]]]) -> None:
    e, kubelet, _ = engines("dual_socket_two_numa_ht", policy, "pod", full_pcpus, reserved,
                            options=("align-by-socket",))
    for step in run(e, (kubelet,), *seq, back_to_back=True):
        if step.kubelet_took_held:  # (test_known_pod.py: the kubelet gave a CPU another container holds)
            break
        assert step.ours == step.kubelet, step
