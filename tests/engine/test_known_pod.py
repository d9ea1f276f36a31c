# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)
"""A later container of a pod already seen (issue 36, item 1).

Where a pod's containers come back to back (no other pod allocates in between, as the kubelet
allocates them at pod admission), the kubelet v1.32's answer, refusals included; where pods
interleave, the extension the README states (the pod keeps its init containers' CPUs). The kubelet is
naive_kubelet.py, a port of policy_static.go and the topology manager's scopes.

Upstream cases (kubernetes/kubernetes, read with the search tool; facts and expectations carried
over): cpumanager/cpu_manager_test.go ``TestCPUManagerAddWithInitContainers``;
cpumanager/policy_static_test.go ``TestStaticPolicyReuseCPUs`` and ``TestStaticPolicyDoNotReuseCPUs``;
cpumanager/topology_hints_test.go ``TestPodGuaranteedCPUs`` and ``returnTestCases`` as
``TestGetPodTopologyHints`` asks them (pod scope).
"""

from __future__ import annotations

from typing import Any

import kube_topologies as kt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubelet_sequences import POLICIES, TOPOLOGIES, engines, run, sequences
from naive_kubelet import KContainer, KPod, Kubelet
from test_admission import admit, engine, req

from nri_pinner.engine.admission_engine import Engine
from nri_pinner.engine.cpumanager.options import StaticPolicyOptions
from nri_pinner.engine.cpumanager.state import Assignment, EngineState
from nri_pinner.engine.cpuset import EMPTY, CPUSet
from nri_pinner.engine.topology.model import CPUInfo, Topology

S = CPUSet.parse

# -- upstream: several init and app containers, policy none ----------------------------------------

# (description, init CPUs, app CPUs, expected init sets, expected app sets); 0 = 100m (shared pool)
ADD_WITH_INIT = [
    ("No Guaranteed Init CPUs", [0], [4], [""], ["0,1,4,5"]),
    ("Equal Number of Guaranteed CPUs", [4], [4], ["0,1,4,5"], ["0,1,4,5"]),
    ("More Init Container Guaranteed CPUs", [6], [4], ["0-2,4-6"], ["0,1,4,5"]),
    ("Less Init Container Guaranteed CPUs", [2], [4], ["0,4"], ["0,1,4,5"]),
    ("Multi Init Container Equal CPUs", [2, 2], [2], ["0,4", "0,4"], ["0,4"]),
    ("Multi Init Container Less CPUs", [4, 4], [2], ["0,1,4,5", "0,1,4,5"], ["0,4"]),
    ("Multi Init Container More CPUs", [2, 2], [4], ["0,4", "0,4"], ["0,1,4,5"]),
    ("Multi Init Container Increasing CPUs", [2, 4], [6], ["0,4", "0,1,4,5"], ["0-2,4-6"]),
    ("Multi Init, Multi App Container Split CPUs", [2, 4], [2, 2], ["0,4", "0,1,4,5"], ["0,4", "1,5"]),
]


def _pod(inits: list[int], apps: list[int], sidecars: tuple[int, ...] = ()) -> KPod:
    return KPod("pod", (*(KContainer(f"initContainer-{i}", n, init=True, restartable=i in sidecars)
                          for i, n in enumerate(inits)),
                        *(KContainer(f"appContainer-{i}", n) for i, n in enumerate(apps))))


def _admit_pod(e: Engine, state: EngineState, pod: KPod) -> tuple[EngineState, list[CPUSet]]:
    """The pod's containers back to back through the engine: each one's exclusive set (empty = shared)."""
    got = []
    for c in pod.containers:
        milli = c.cpus * 1000 or 100
        state, d = admit(e, state, req(pod.uid, c.name, milli / 1000, init=c.init, restartable=c.restartable))
        assert d.admitted
        got.append(d.cpus if d.exclusive else EMPTY)
    return state, got


@pytest.mark.parametrize(("desc", "inits", "apps", "want_init", "want_app"), ADD_WITH_INIT,
                         ids=[c[0] for c in ADD_WITH_INIT])
def test_add_with_init_containers(desc: str, inits: list[int], apps: list[int], want_init: list[str],
                                  want_app: list[str]) -> None:
    topo = kt.single_socket_ht()
    e = engine(topo)  # no reserved CPUs, as upstream
    pod = _pod(inits, apps)
    state, got = _admit_pod(e, e.initial_state(), pod)
    assert got == [S(w) for w in (*want_init, *want_app)]
    held = EMPTY
    for cpus in got:
        held = held | cpus
    assert state.default_set == topo.online - held
    kubelet = Kubelet(topo, EMPTY, StaticPolicyOptions())
    assert [o.cpus for o in kubelet.admit(pod)] == got  # the oracle agrees


def test_reuse_cpus_then_remove_the_init_container() -> None:  # TestStaticPolicyReuseCPUs
    e = engine(kt.single_socket_ht())
    state, got = _admit_pod(e, e.initial_state(), _pod([4], [2]))
    assert got == [S("0,1,4,5"), S("0,4")] and state.default_set == S("2,3,6,7")
    assert e.remove(state, "pod", "initContainer-0").default_set == S("1-3,5-7")


def test_do_not_reuse_cpus_of_a_restartable_init_container() -> None:  # TestStaticPolicyDoNotReuseCPUs
    e = engine(kt.single_socket_ht())
    state, got = _admit_pod(e, e.initial_state(), _pod([4], [2], sidecars=(0,)))
    assert got == [S("0,1,4,5"), S("2,6")] and state.default_set == S("3,7")


@pytest.mark.parametrize(("inits", "sidecars", "apps", "want"), [
    ([2], (), [2], 2), ([5], (), [5], 5), ([2], (), [5], 5), ([5], (), [2], 5), ([2, 4], (), [2, 4], 6),
    ([1], (0,), [1], 2), ([5, 1, 2, 3], (1, 2, 3), [1], 7), ([5, 1, 2, 5, 3], (1, 2, 4), [1], 8),
    ([10, 200], (0,), [100], 210)])
def test_pod_guaranteed_cpus(inits: list[int], sidecars: tuple[int, ...], apps: list[int], want: int) -> None:
    assert _pod(inits, apps, sidecars).pod_guaranteed_cpus() == want  # the oracle's pod total


# -- upstream: GetPodTopologyHints, pod scope --------------------------------------------------------


def _hints_machine() -> Topology:
    """topology_hints_test.go returnMachineInfo: node 0 cores (0,6) (1,7) (2,8), node 1 (3,9) (4,10) (5,11)."""
    return Topology(tuple(CPUInfo(cpu=c, socket=c % 6 // 3, core=c % 3, numa=c % 6 // 3, l3=0) for c in range(12)))


POD_HINTS = [  # (name, request, assigned to fakeContainer, default set, expected CPU hints)
    ("Request 2 CPUs, 4 available on NUMA 0, 6 available on NUMA 1", 2, None, "2-11", "{0} {1} {0,1}~"),
    ("Request 5 CPUs, 4 available on NUMA 0, 6 available on NUMA 1", 5, None, "2-11", "{1} {0,1}~"),
    ("Request 7 CPUs, 4 available on NUMA 0, 6 available on NUMA 1", 7, None, "2-11", "{0,1}"),
    ("Request 11 CPUs, 4 available on NUMA 0, 6 available on NUMA 1", 11, None, "2-11", "none"),
    ("Request 2 CPUs, 1 available on NUMA 0, 1 available on NUMA 1", 2, None, "0,3", "{0,1}~"),
    ("Request more CPUs than available", 5, None, "0-3", "none"),
    ("Regenerate Single-Node NUMA Hints if already allocated 1/2", 2, "0,6", "", "{0} {0,1}~"),
    ("Regenerate Single-Node NUMA Hints if already allocated 2/2", 2, "3,9", "", "{1} {0,1}~"),
    ("Regenerate Cross-NUMA Hints if already allocated", 11, "0-10", "", "{0,1}"),
    ("Requested less than already allocated", 2, "0,3,6,9", "", "none"),
    ("Requested more than already allocated", 11, "0,3,6,9", "", "none"),
]


@pytest.mark.parametrize(("name", "n", "assigned", "default", "want"), POD_HINTS, ids=[c[0] for c in POD_HINTS])
def test_get_pod_topology_hints(name: str, n: int, assigned: str | None, default: str, want: str) -> None:
    # (a reserved CPU outside the shared pool: without one the engine keeps the last shared CPU)
    e = engine(_hints_machine(), {"reserved_cpus": "1"}, {"policy": "best-effort", "scope": "pod"})
    held = {} if assigned is None else {("fakePod", "fakeContainer"): Assignment(
        "fakePod", "fakeContainer", S(assigned), S(assigned), exclusive=True)}
    state = EngineState(default_set=S(default), assignments=held)
    _, d = e.admit(state, req("fakePod", "fakeContainer", n, pod_exclusive_cpus=n))
    assert sorted(d.provider_hints["cpu"]["cpu"].split()) == sorted(want.split())


# -- rules, back to back (each fails on the engine before issue 36) ---------------------------------

DUAL = {"cpu_manager": {"reserved_cpus": "0"}}  # kt.dual_socket_ht: NUMA 0 = even CPUs, NUMA 1 = odd


def _tm(policy: str, scope: str = "container") -> dict[str, Any]:
    return {"policy": policy, "scope": scope}


def test_a_removed_init_containers_cpus_stay_reusable_for_its_pod() -> None:
    # policy_static.go:407-418: RemoveContainer leaves cpusToReuse alone; generateCPUTopologyHints
    # (:658-672) counts those CPUs as reusable and again as available: NUMA 1 "has" 6 for 4 CPUs, so
    # restricted admits with hint {1} (and the allocation spills to NUMA 0) where 3 free CPUs refuse.
    e = engine(kt.dual_socket_ht(), DUAL["cpu_manager"], _tm("restricted"))
    s, _ = admit(e, e.initial_state(), req("q", "app", 3))  # 2,6,8
    s, _ = admit(e, s, req("r", "app", 3))  # 1,3,7
    s, init = admit(e, s, req("p", "init", 3, init=True))
    assert init.cpus == S("5,9,11")
    s = e.remove(s, "p", "init")
    s, app = admit(e, s, req("p", "app", 4))
    assert app.admitted and app.hint is not None and app.hint.affinity == 0b10 and app.cpus == S("4-5,9,11")


def test_an_init_container_admitted_again_makes_its_cpus_reusable_again() -> None:
    # policy_static.go:370-371 -> :306: "already present" runs updateCPUsToReuse, which adds the init
    # container's whole set back; once the app container that took it is gone, the next one reuses it.
    e = engine(kt.dual_socket_no_ht(), DUAL["cpu_manager"])
    s, init = admit(e, e.initial_state(), req("p", "init", 2, init=True))
    s, app = admit(e, s, req("p", "app", 3))
    assert (init.cpus, app.cpus) == (S("1-2"), S("1-3"))
    s, again = admit(e, s, req("p", "init", 2, init=True))
    assert again.cpus == init.cpus
    s = e.remove(s, "p", "app")
    s, app2 = admit(e, s, req("p", "app2", 6))
    assert app2.admitted and app2.cpus == S("1-2,4-7")


def test_pod_scope_keeps_the_pods_hint_when_a_node_frees_up() -> None:
    # The pod's hints are merged once, at its admission (scope_pod.go:48, kubelet v1.32.10), and that
    # hint is every container's (:55-57): NUMA 0 freeing up (q went) before c1 does not move c1 there.
    # (Before issue 44 each container merged the pod's hints again and c1 got {0}: 2,6,8.)
    e = engine(kt.dual_socket_ht(), DUAL["cpu_manager"], _tm("best-effort", "pod"))
    s, _ = admit(e, e.initial_state(), req("q", "app", 3, pod_exclusive_cpus=3))
    s, _ = admit(e, s, req("r", "app", 3, pod_exclusive_cpus=3))
    s, c0 = admit(e, s, req("p", "c0", 1, pod_exclusive_cpus=4))
    assert c0.cpus == S("4") and c0.hint is not None and c0.hint.affinity == 0b11  # 4 fit no single node
    s = e.remove(s, "q", "app")
    s, c1 = admit(e, s, req("p", "c1", 3, pod_exclusive_cpus=4))
    assert c1.hint == c0.hint and c1.cpus == S("5,9,11")


def test_the_cpus_an_app_container_holds_are_never_reused() -> None:
    # The deliberate difference: once the init container is admitted again the kubelet's set holds
    # CPU 1 again, which app container a0 took, and it hands CPU 1 to a1 as well; we refuse.
    topo = kt.dual_socket_no_ht()
    e = engine(topo, DUAL["cpu_manager"])
    kubelet = Kubelet(topo, e.policy.reserved, e.policy.options)
    pods = {"q": KPod("q", (KContainer("app", 4),)),
            "p": KPod("p", (KContainer("i0", 1, init=True), KContainer("a0", 1), KContainer("a1", 3)))}
    s = e.initial_state()
    for uid, c in (("q", 0), ("p", 0), ("p", 1), ("p", 0), ("p", 2)):
        spec = pods[uid].containers[c]
        s, d = admit(e, s, req(uid, spec.name, spec.cpus, init=spec.init))
        theirs = kubelet.step(pods[uid], spec)
    assert theirs.cpus == S("1-3") and kubelet.assignments[("p", "a0")] == S("1")
    assert not d.admitted and d.reason == "InsufficientCPUs"


# -- where pods interleave: the extension -----------------------------------------------------------


def _sixty_four() -> Topology:
    """64 CPUs: 2 sockets = NUMA nodes of 32, SMT siblings adjacent."""
    return Topology(tuple(CPUInfo(cpu=c, socket=c // 32, core=c % 32 // 2, numa=c // 32, l3=c // 32)
                          for c in range(64)))


def test_another_pod_in_between_leaves_the_pod_its_init_cpus() -> None:
    # The README's example: r's allocation drops p's cpusToReuse in the kubelet (policy_static.go:286-291),
    # which then gives 38-41 and leaves CPU 32 to the exited init container until the pod goes.
    topo = _sixty_four()
    e = engine(topo, {"reserved_cpus": "0-1"})
    kubelet = Kubelet(topo, e.policy.reserved, e.policy.options)
    pods = {"q": KPod("q", (KContainer("app", 30),)), "r": KPod("r", (KContainer("app", 4),)),
            "p": KPod("p", (KContainer("setup", 1, init=True), KContainer("app", 4)))}
    s = e.initial_state()
    for uid, c in (("q", 0), ("p", 0), ("r", 0), ("p", 1)):
        spec = pods[uid].containers[c]
        s, d = admit(e, s, req(uid, spec.name, spec.cpus, init=spec.init))
        theirs = kubelet.step(pods[uid], spec)
    assert theirs.cpus == S("38-41")
    assert d.cpus == S("32-33,38-39") and d.cpus & s.get("p", "setup").current == S("32")  # type: ignore[union-attr]


def test_a_removed_init_containers_cpus_count_only_until_another_pod_allocates() -> None:
    e = engine(kt.dual_socket_ht(), DUAL["cpu_manager"])
    s, init = admit(e, e.initial_state(), req("p", "init", 2, init=True))
    s, keep = admit(e, s, req("p", "keep", 1, init=True))
    s = e.remove(s, "p", "init")
    assert e.policy.reusable(s, "p") == init.cpus | keep.cpus  # the kubelet's set, removed CPUs included
    s, _ = admit(e, s, req("q", "app", 1))
    assert e.policy.reusable(s, "p") == keep.cpus  # another pod allocated: what p still holds


# -- properties against the kubelet port -------------------------------------------------------------


@st.composite
def setups(draw: st.DrawFn) -> tuple[str, str, str, bool, int]:
    policy = draw(st.sampled_from(POLICIES))
    scope = "container" if policy == "none" else draw(st.sampled_from(["container", "pod"]))
    return draw(st.sampled_from(sorted(TOPOLOGIES))), policy, scope, draw(st.booleans()), draw(st.integers(1, 2))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups(), seq=sequences())
def test_back_to_back_the_kubelets_answers(setup: tuple[str, str, str, bool, int],
                                           seq: tuple[list[KPod], list[tuple[str, int]]]) -> None:
    e, kubelet, _ = engines(*setup)
    for step in run(e, (kubelet,), *seq, back_to_back=True):
        if step.kubelet_took_held:  # the kubelet gave a CPU another container holds (we never do):
            break  # from here on the two states differ
        assert step.ours == step.kubelet, step


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups(), seq=sequences())
def test_interleaved_the_documented_extension(setup: tuple[str, str, str, bool, int],
                                              seq: tuple[list[KPod], list[tuple[str, int]]]) -> None:
    e, _, extended = engines(*setup)
    for step in run(e, (extended,), *seq, back_to_back=False):
        assert step.ours == step.kubelet, step
