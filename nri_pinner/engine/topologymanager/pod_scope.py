"""Pod scope as the kubelet does it: one merge per pod admission, its best hint for every container.

The kubelet merges a pod's hints once, when it admits the pod (v1.32 topologymanager/scope_pod.go:48),
and hands that best hint to each of the pod's containers in turn before their allocations (:55-57).
NRI shows the containers one create at a time, so the engine merges at the pod's first admitted
container (with the pod's totals) and keeps the hint in ``EngineState.pod_hints`` for the pod's later
containers; it goes with the pod's last record, as the kubelet drops a pod's hints with its last
container (scope.go:129-132). A pod none of whose creates has been admitted has no hint: its next
create merges afresh, so on an unchanged node each of its containers meets the same refusal.

After a plugin restart the service rebuilds the records (with their ``numa_affinity``, which the
checkpoint keeps) but not the pod hints. In pod scope every container of a pod is admitted with the
pod hint, so when all the pod's exclusive records carry one affinity, that is the hint. Its
preferred flag is not recorded: under restricted and single-numa-node a hint that admitted a pod
was preferred; under best-effort it is taken as not preferred (that only relaxes the memory
manager's preferred-hint checks). Without such records the pod's hints are merged again for the pod
as it stands, as the kubelet re-admits a pod after its own restart (it keeps no hints either).
"""

from __future__ import annotations

from ..cpumanager.state import EngineState
from .hints import TopologyHint
from .merge import Policy, TopologyManager


def known_pod_hint(state: EngineState, pod: str, manager: TopologyManager) -> tuple[TopologyHint | None, bool]:
    """(the pod's hint, whether it was recovered from its records rather than remembered); (None,
    False) when neither knows one."""
    remembered = state.pod_hints.get(pod)
    if remembered is not None:
        return remembered, False
    hint = recorded_hint(state, pod, manager)
    return hint, hint is not None


def recorded_hint(state: EngineState, pod: str, manager: TopologyManager) -> TopologyHint | None:
    """The affinity every exclusive record of the pod was admitted with, when they agree on one
    (None when they disagree, one has none, or it cannot be this policy's hint)."""
    masks = {a.numa_affinity for a in state.pod_assignments(pod) if a.exclusive}
    if len(masks) != 1:
        return None
    mask = masks.pop()
    if mask is None:
        return None
    mask &= manager.default_mask
    strict = manager.policy in (Policy.RESTRICTED, Policy.SINGLE_NUMA_NODE)
    if not mask or (manager.policy is Policy.SINGLE_NUMA_NODE and mask.bit_count() != 1):
        return None
    return TopologyHint(mask, strict)
