"""Pod-level resource managers (kubelet 1.36 alpha `PodLevelResourceManagers`), pod scope, CPUs.

Ported from kubernetes/kubernetes pkg/kubelet/cm/cpumanager/policy_static_test.go (the copy carrying
the feature, docs/kubelet-compatibility.md P8): TestStaticPolicyAllocatePod and
TestValidatePodScopeResources, rows with both gates on; the pod's CPU hints follow GetPodTopologyHints.
The kubelet's test pods give every container 100Mi of memory, request = limit
(makePodWithContainersAndPodLevelResources); so do these.
"""

from __future__ import annotations

import kube_topologies as kt
import pytest

from nri_pinner.engine.cpumanager.pod_level import (
    EmptyPodSharedPool,
    PodLevelContainer,
    PodLevelSpec,
    allocate_pod,
    empty_pool_problem,
    pod_cpu_hints,
    remove_container,
)
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.cpumanager.static_policy import StaticPolicy
from nri_pinner.engine.cpuset import CPUSet

MI100 = 100 * 2**20
NUMA0 = 0b1


def S(text: str) -> CPUSet:
    return CPUSet.parse(text)


def C(name: str, cpus: str = "", *, init: bool = False, sidecar: bool = False) -> PodLevelContainer:
    """A test container: ``cpus`` is its CPU request = limit ("" = none: the pod pool)."""
    milli = int(float(cpus) * 1000) if cpus else 0
    return PodLevelContainer(name, milli, milli, MI100, MI100, init=init or sidecar, restartable=sidecar)


def pod(name: str, cpus: str, *containers: PodLevelContainer, limit: str | None = None) -> PodLevelSpec:
    """A pod with spec.resources cpu ``cpus`` (request) and ``limit`` (default: the request)."""
    return PodLevelSpec(name, int(float(cpus) * 1000), limit is None or limit == cpus, containers)


def _policy() -> tuple[StaticPolicy, EngineState]:
    topo = kt.dual_socket_ht()  # the kubelet's topoDualSocketHT, reserved CPU 0
    return StaticPolicy(topo, S("0")), EngineState(default_set=S("0-11"))


# TestStaticPolicyAllocatePod (topoDualSocketHT, reserved {0}, hint NUMA 0 preferred):
# (description, pod, expected CPUs per container, expected default set)
ALLOCATE_POD = [
    ("guaranteed pod with pod-level resources",
     pod("pod1", "2", C("container1", "1")), {"container1": "2"}, "0,1,3-7,9-11"),
    ("non-guaranteed container",
     pod("p", "1", C("ngu-container")), {"ngu-container": "6"}, "0-5,7-11"),
    ("mix of guaranteed and non-guaranteed containers",
     pod("p", "3", C("gu-container-1", "1"), C("gu-container-2", "1"), C("ngu-container")),
     {"gu-container-1": "6", "gu-container-2": "2", "ngu-container": "8"}, "0,1,3-5,7,9-11"),
    ("guaranteed standard and init containers",
     pod("p", "2", C("gu-init-container-1", "1", init=True), C("gu-init-container-2", "1", init=True),
         C("gu-container-1", "1"), C("gu-container-2", "1")),
     {"gu-init-container-1": "2", "gu-init-container-2": "2", "gu-container-1": "2", "gu-container-2": "8"},
     "0,1,3-7,9-11"),
    ("guaranteed restartable and non-guaranteed standard init containers",
     pod("p", "3", C("ngu-init-container-1", init=True), C("gu-init-restartable-2", "1", sidecar=True),
         C("ngu-init-container-3", init=True), C("gu-container-1", "1"), C("ngu-container-2")),
     {"ngu-init-container-1": "2,6,8", "gu-init-restartable-2": "6", "ngu-init-container-3": "2,8",
      "gu-container-1": "2", "ngu-container-2": "8"}, "0,1,3-5,7,9-11"),
    ("non-guaranteed restartable init container",
     pod("p", "3", C("ngu-init-container-1", init=True), C("ngu-init-restartable-2", sidecar=True),
         C("ngu-init-container-3", init=True), C("gu-container-1", "1"), C("ngu-container-2")),
     {"ngu-init-container-1": "2,6,8", "ngu-init-restartable-2": "2,8", "ngu-init-container-3": "2,6,8",
      "gu-container-1": "6", "ngu-container-2": "2,8"}, "0,1,3-5,7,9-11"),
]


@pytest.mark.parametrize(("description", "spec", "expected", "default"), ALLOCATE_POD,
                         ids=[row[0] for row in ALLOCATE_POD])
def test_allocate_pod_as_the_kubelet(description: str, spec: PodLevelSpec, expected: dict[str, str],
                                     default: str) -> None:
    policy, state = _policy()
    alloc = allocate_pod(policy, state, spec, NUMA0)
    assert alloc is not None
    assert {name: str(cpus) for name, cpus in alloc.cpus.items()} == {n: str(S(c)) for n, c in expected.items()}
    assert alloc.default_set == S(default)
    assert alloc.block == S("0-11") - S(default)


def test_an_empty_pod_pool_is_refused_and_nothing_taken() -> None:
    # TestStaticPolicyAllocatePod "should reject a pod that would result in an empty pod shared pool"
    policy, state = _policy()
    spec = pod("p", "2", C("gu-container-1", "1"), C("gu-container-2", "1"), C("ngu-container"))
    with pytest.raises(EmptyPodSharedPool, match="leaving no cpus for shared containers"):
        allocate_pod(policy, state, spec, NUMA0)
    assert state.default_set == S("0-11")


def test_a_pod_that_is_not_guaranteed_gets_no_block() -> None:
    # TestStaticPolicyAllocatePod "should not allocate exclusive CPUs to a non-guaranteed pod"
    policy, state = _policy()
    assert allocate_pod(policy, state, pod("p", "2", C("gu-container-1", "1"), limit="1"), NUMA0) is None


def test_only_a_container_whose_cpu_and_memory_requests_equal_its_limits_gets_a_slice() -> None:
    # guaranteedCPUs + cm/qos IsContainerEquivalentQOSGuaranteed: both resources set and equal, whole CPUs
    assert C("a", "2").exclusive_cpus() == 2
    assert C("a", "1.5").exclusive_cpus() == 0
    assert PodLevelContainer("a", 2000, 2000, MI100, 2 * MI100).exclusive_cpus() == 0
    assert PodLevelContainer("a", 2000, 2000, 0, 0).exclusive_cpus() == 0
    assert PodLevelContainer("a", 2000, 4000, MI100, MI100).exclusive_cpus() == 0


# TestValidatePodScopeResources (topoSingleSocketHT, both gates on, scope pod): (name, pod, refused)
VALIDATE = [
    ("pod-level != guaranteed containers, has pod pool containers",
     pod("p", "4", C("c1", "2"), C("c2")), False),
    ("only guaranteed containers", pod("p", "4", C("c1", "2"), C("c2", "2")), False),
    ("only pod pool containers", pod("p", "4", C("c1"), C("c2")), False),
    ("pod-level == guaranteed containers, pod pool containers with request",
     pod("p", "6", C("c1", "3"), C("c2", "2"), PodLevelContainer("c3", 500, 1000, MI100, MI100), C("c4")),
     False),
    ("pod-level == guaranteed containers, has pod pool containers",
     pod("p", "5", C("c1", "3"), C("c2", "2"), C("c3")), True),
    ("standard and restartable init containers",
     pod("p", "2", C("init-container1", "1", init=True), C("restartable-init-container1", "1", sidecar=True),
         C("container1")), False),
    ("pod-level equal to init and standard container resources",
     pod("p", "2", C("init-container1", "2", init=True), C("container1", "2")), False),
    ("shared standard init container after a sidecar taking the budget",
     pod("p", "2", C("restartable-init-container1", "2", sidecar=True), C("init-container1", init=True)), True),
    ("shared standard init container before a sidecar taking the budget",
     pod("p", "2", C("init-container1", init=True), C("restartable-init-container1", "2", sidecar=True)), False),
    ("restartable guaranteed init containers take the budget, a shared one left",
     pod("p", "2", C("restartable-init-container1", "2", sidecar=True),
         C("restartable-init-container2", sidecar=True)), True),
    ("one restartable init container and one standard container",
     pod("p", "2", C("restartable-init-container1", "1", sidecar=True), C("container1", "1")), False),
]


@pytest.mark.parametrize(("name", "spec", "refused"), VALIDATE, ids=[row[0] for row in VALIDATE])
def test_validate_pod_scope_resources_as_the_kubelet(name: str, spec: PodLevelSpec, refused: bool) -> None:
    assert bool(empty_pool_problem(spec)) is refused


def test_the_block_goes_back_to_the_node_only_with_the_pods_last_container() -> None:
    # RemoveContainer: a pod-level pod's CPUs are released when its last container is removed
    policy, state = _policy()
    spec = pod("p", "3", C("gu", "1"), C("ngu"))
    alloc = allocate_pod(policy, state, spec, NUMA0)
    assert alloc is not None
    left, default = remove_container(alloc, alloc.default_set, "gu")
    assert left is not None and default == alloc.default_set
    gone, default = remove_container(left, default, "ngu")
    assert gone is None and default == S("0-11")


def test_the_block_is_taken_on_the_hinted_numa_node() -> None:
    policy, state = _policy()
    alloc = allocate_pod(policy, state, pod("p", "4", C("gu", "2"), C("ngu")), 0b10)
    assert alloc is not None
    assert alloc.block.issubset(S("1,3,5,7,9,11")) and len(alloc.block) == 4
    assert alloc.exclusive == frozenset({"gu"}) and alloc.pod_pool == alloc.block - alloc.cpus["gu"]


def _hints(spec: PodLevelSpec) -> list[tuple[int | None, bool]] | None:
    policy, state = _policy()
    hints = pod_cpu_hints(policy, state, spec)
    return None if hints is None else sorted((h.affinity, h.preferred) for h in hints)


def test_the_pods_cpu_hints_are_its_blocks() -> None:
    # GetPodTopologyHints: requested = podGuaranteedCPUs, the pod's spec.resources CPUs (not its containers')
    assert _hints(pod("p", "3", C("gu", "1"), C("ngu"))) == [(0b01, True), (0b10, True), (0b11, False)]
    assert _hints(pod("p", "7", C("gu", "1"), C("ngu"))) == [(0b11, True)]  # 5 + 6 free, 6 per node


def test_a_pod_the_empty_pool_check_refuses_gets_hints_none_can_meet() -> None:
    assert _hints(pod("p", "2", C("gu-container-1", "1"), C("gu-container-2", "1"), C("ngu"))) == []


def test_a_pod_without_a_block_has_no_cpu_preference() -> None:
    assert _hints(pod("p", "2", C("gu", "1"), limit="3")) is None
    assert _hints(pod("p", "1.5", C("ngu"))) is None
