"""Pod scope with the kubelet 1.36 alpha gate `PodLevelResourceManagers`: the pod's one admission
(its block, held in `EngineState.pod_blocks`) and each container's placement in it.

Kubelet rules (kubernetes/kubernetes copies in the source index; README "Pod-level resource managers"):
* topologymanager/scope_pod.go `admitUsingPodResources` (copy 1c9cf914): one merge of the providers'
  `GetPodTopologyHints` for the whole pod; not admitted → NewPodLevelTopologyAffinityError; the best
  hint is every container's; then `AllocatePod` once. Only the CPU provider's hints are merged here
  (cpumanager/pod_level.py `pod_cpu_hints`): the Memory Manager's pod-level path is not built and the
  device hints are per container (NRI shows them one create at a time).
* cpumanager/policy_static.go `AllocatePod` (copy 62c7eac0): validatePodScopeResources, then the block
  by the hint and its partition (cpumanager/pod_level.py `allocate_pod`); every container of the pod
  gets its CPUs from that partition, never from the node (`SetCPUSet` for each).
* the same file's `RemoveContainer`: a container of a pod-level pod gives nothing back; the pod's last
  one gives the whole block back (`release`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .cpumanager.pod_level import EmptyPodSharedPool, PodLevelSpec, allocate_pod, empty_pool_problem, pod_cpu_hints
from .cpumanager.state import Assignment, EngineState, PodBlock
from .cpuset import EMPTY
from .decision import Decision
from .errors import InsufficientCPUs, TopologyAffinityError
from .topologymanager.hints import TopologyHint
from .topologymanager.merge import Policy, merge

if TYPE_CHECKING:
    from .admission_engine import Engine


def admit_pod(engine: Engine, state: EngineState, spec: PodLevelSpec) -> tuple[EngineState, TopologyHint | None]:
    """The pod's admission: its block out of the shared pool, its partition and hint recorded. The
    state is returned unchanged when the pod has no block (not Guaranteed, or no whole CPUs: its
    containers use the node's shared pool); an ``AdmissionError`` when it cannot be admitted."""
    if spec.pod_cpus() == 0:
        return state, None
    if problem := empty_pool_problem(spec):
        raise EmptyPodSharedPool(problem)
    hint = None
    if engine.manager.policy is not Policy.NONE:
        cpu = pod_cpu_hints(engine.policy, state, spec)
        result = merge(engine.manager, [None if cpu is None else {"cpu": cpu}])
        if not result.admit:
            raise TopologyAffinityError("pod with pod-level resources failed admission under pod-scope topology "
                                        f"manager ({engine.manager.policy.value}: no NUMA placement for "
                                        f"{spec.pod_cpus()} CPUs)")
        hint = result.hint
    alloc = allocate_pod(engine.policy, state, spec, hint.affinity if hint is not None else None)
    if alloc is None:
        return state, None
    if not alloc.default_set and not engine.policy.reserved:  # as Engine.admit: shared containers need CPUs
        n = len(alloc.block)
        raise InsufficientCPUs(n, n, f"taking the pod's block of {n} CPUs would leave the shared pool empty; "
                                     "reserve CPUs (cpu_manager.reserved_cpus or reserved_cpu_count)")
    block = PodBlock(alloc.block, dict(alloc.cpus), alloc.exclusive, alloc.pod_pool)
    state = state.with_pod_block(spec.pod, block, alloc.default_set)
    return (state.with_pod_hint(spec.pod, hint) if hint is not None else state), hint


def place(engine: Engine, state: EngineState, pod: str, container: str, *, init: bool = False,
          restartable: bool = False) -> tuple[EngineState, Decision]:
    """A container of an admitted pod: its slice (an exclusive record, no shared-pool change: the
    block is out already) or its share of the block (a shared record; `cpus_in_block` says where it
    runs: records.desired_of). A container the partition does not name runs on the pod pool."""
    block = state.pod_blocks[pod]
    exclusive = container in block.exclusive
    cpus = block.cpus.get(container, block.pod_pool)
    hint = state.pod_hints.get(pod)
    held = cpus if exclusive else EMPTY
    state = state.with_changes(put=Assignment(pod, container, held, held, exclusive, init, restartable,
                                              hint.affinity if hint is not None else None))
    return state, Decision(pod, container, True, exclusive, cpus, engine.mems_of(cpus),
                           engine.policy.shared_pool(state), hint)


def release(engine: Engine, state: EngineState, pod: str, container: str) -> EngineState:
    """RemoveContainer of a pod-level pod: the record goes; the block only with the pod's last one."""
    state = state.with_changes(drop=(pod, container))
    if state.pod_assignments(pod):
        return state
    block = state.pod_blocks[pod]
    state = state.with_pod_block(pod, None, state.default_set | (block.block & engine.policy.managed_shared))
    return state.with_pod_hint(pod, None)
