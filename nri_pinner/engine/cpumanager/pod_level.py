"""Pod-level resource managers (kubelet 1.36 alpha gate `PodLevelResourceManagers`), the CPU part of
topology-manager pod scope: a pod that sets `spec.resources` gets one NUMA-aligned block of its
`spec.resources` CPUs, exclusive slices of that block for its Guaranteed-equivalent containers and a
pod-private shared pool (the rest of the block) for the others.

Rules and sources (kubernetes/kubernetes `pkg/kubelet/cm/cpumanager/policy_static.go` as it carries
the feature; README "Pod-level resource managers" names the copy read):
* `podGuaranteedCPUs`: the block is the pod's integral `spec.resources` CPU request of a Guaranteed pod,
  0 (nothing to do) otherwise;
* `guaranteedCPUs` + `cm/qos.IsContainerEquivalentQOSGuaranteed`: a container gets an exclusive slice
  only when its own CPU and memory requests are set, non-zero and equal to its limits, and the CPU
  request is whole;
* `validatePodScopeResources`: refused when a container needing the pod pool would find it empty;
* `AllocatePod`: block by the topology hint (allocateCPUs, no reusable CPUs); init containers in order
  (an exclusive one slices the block minus the sidecars' slices, a restartable one keeps its slice, a
  shared regular one gets the block minus the sidecars' slices); then the app containers slice what
  the sidecars left; every other container gets what remains (the pod pool);
* `GetPodTopologyHints`: the pod's CPU hints are those of its block; none can be met (an empty list)
  when the empty-pool check refuses the pod; no preference (None) when it has no block;
* `RemoveContainer`: nothing goes back to the node until the pod's last container is removed, then
  the whole block does.

Pure functions: the caller holds the one state and writes what they return.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..cpuset import EMPTY, CPUSet
from ..errors import AdmissionError
from ..topologymanager.cpu_hints import cpu_topology_hints
from ..topologymanager.hints import TopologyHint
from .state import EngineState
from .static_policy import StaticPolicy


class EmptyPodSharedPool(AdmissionError):
    """The kubelet's admission.NewEmptyPodSharedPoolError: the pod's exclusive slices leave its shared
    containers no CPUs."""

    reason = "EmptyPodSharedPool"


@dataclass(frozen=True)
class PodLevelContainer:
    """One container of the pod spec, as the kubelet's pod-level path reads it (millicores, bytes)."""

    name: str
    cpu_request_milli: int = 0
    cpu_limit_milli: int = 0
    memory_request: int = 0
    memory_limit: int = 0
    init: bool = False
    restartable: bool = False  # a sidecar: an init container with restartPolicy Always

    def exclusive_cpus(self) -> int:
        """Whole CPUs of an exclusive slice; 0 = the pod pool."""
        cpu_equal = self.cpu_request_milli > 0 and self.cpu_request_milli == self.cpu_limit_milli
        memory_equal = self.memory_request > 0 and self.memory_request == self.memory_limit
        if not (cpu_equal and memory_equal) or self.cpu_request_milli % 1000:
            return 0
        return self.cpu_request_milli // 1000


@dataclass(frozen=True)
class PodLevelSpec:
    """``containers``: init containers in spec order, then app containers. ``guaranteed``: the pod's
    QoS class is Guaranteed (its `spec.resources` requests equal its limits)."""

    pod: str
    cpu_request_milli: int
    guaranteed: bool
    containers: tuple[PodLevelContainer, ...]

    def pod_cpus(self) -> int:
        """podGuaranteedCPUs for a pod with pod-level resources."""
        if not self.guaranteed or self.cpu_request_milli % 1000:
            return 0
        return self.cpu_request_milli // 1000


@dataclass(frozen=True)
class PodAllocation:
    """The block, each container's CPUs, the pod pool and the node's shared pool after the admission.
    ``exclusive``: the containers holding a slice of their own; the others share (a regular init
    container the block less the sidecars' slices, the rest the pod pool)."""

    pod: str
    block: CPUSet
    cpus: Mapping[str, CPUSet]
    exclusive: frozenset[str]
    pod_pool: CPUSet
    default_set: CPUSet
    containers: frozenset[str] = field(default_factory=frozenset)


def empty_pool_problem(spec: PodLevelSpec) -> str:
    """validatePodScopeResources: why the pod's shared containers would find no CPUs ("" = none)."""
    total = spec.pod_cpus()
    sidecars_and_apps = 0  # exclusive CPUs of the containers that run for the pod's lifetime
    shared_long_running = False
    for c in spec.containers:
        n = c.exclusive_cpus()
        if c.init and not c.restartable:
            if n > 0 and n > total - sidecars_and_apps:
                return (f"pod rejected, largest exclusive init container requests {n} cpus, but only "
                        f"{total - sidecars_and_apps} available")
            if n == 0 and sidecars_and_apps >= total:
                return "pod rejected, pod has shared init containers but no cpus available for them"
            continue
        if n == 0:
            shared_long_running = True
        sidecars_and_apps += n
    if shared_long_running and sidecars_and_apps >= total:
        return ("pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus "
                "for shared containers")
    return ""


def pod_cpu_hints(policy: StaticPolicy, state: EngineState, spec: PodLevelSpec
                  ) -> Sequence[TopologyHint] | None:
    """GetPodTopologyHints for a pod not yet allocated: None = no preference, () = none can be met."""
    total = spec.pod_cpus()
    if total == 0:
        return None
    if empty_pool_problem(spec):
        return ()
    opts = policy.options
    return cpu_topology_hints(policy.topology, policy.available_for_exclusive(state), EMPTY, total,
                              full_pcpus_only=opts.full_pcpus_only, align_by_socket=opts.align_by_socket)


def allocate_pod(policy: StaticPolicy, state: EngineState, spec: PodLevelSpec,
                 numa_affinity: int | None) -> PodAllocation | None:
    """AllocatePod: None when the pod has no block (not Guaranteed, or no whole CPUs: its containers use
    the node's shared pool); raises an ``AdmissionError`` when it cannot be placed (state untouched)."""
    total = spec.pod_cpus()
    if total == 0:
        return None
    if problem := empty_pool_problem(spec):
        raise EmptyPodSharedPool(problem)
    policy.enforce_smt_alignment(state, total)
    block = policy.allocate_cpus(state, total, numa_affinity, EMPTY)
    cpus: dict[str, CPUSet] = {}
    exclusive: set[str] = set()
    sidecars = EMPTY
    for c in (c for c in spec.containers if c.init):
        n = c.exclusive_cpus()
        if n:
            cpus[c.name] = policy.take_preferring_isolated(block - sidecars, n)
            exclusive.add(c.name)
            if c.restartable:
                sidecars |= cpus[c.name]
        elif not c.restartable:  # a regular init container runs alone: all but the sidecars' slices
            cpus[c.name] = block - sidecars
    pool = block - sidecars
    for c in (c for c in spec.containers if not c.init):
        if n := c.exclusive_cpus():
            cpus[c.name] = policy.take_preferring_isolated(pool, n)
            exclusive.add(c.name)
            pool -= cpus[c.name]
    for c in spec.containers:
        cpus.setdefault(c.name, pool)
    return PodAllocation(spec.pod, block, cpus, frozenset(exclusive), pool, state.default_set - block,
                         frozenset(c.name for c in spec.containers))


def remove_container(alloc: PodAllocation, default_set: CPUSet, container: str
                     ) -> tuple[PodAllocation | None, CPUSet]:
    """RemoveContainer for a pod-level pod: (what is left of the allocation, None after the last
    container; the node's shared pool, which gets the whole block back only then)."""
    left = alloc.containers - {container}
    if left:
        return PodAllocation(alloc.pod, alloc.block, alloc.cpus, alloc.exclusive, alloc.pod_pool,
                             default_set, left), default_set
    return None, default_set | alloc.block
