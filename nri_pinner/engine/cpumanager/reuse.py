"""A pod's reusable CPUs: the kubelet's ``cpusToReuse``, kept for every pod.

The kubelet v1.32 (``cpumanager/policy_static.go``) keeps one set per pod and updates it on every
exclusive ``Allocate``, the "already present" one included (:370-371, :387-388), in
``updateCPUsToReuse`` (:285-313): a regular init container's CPUs are added, an app container's or a
sidecar's are taken out, and every other pod's set is dropped. ``RemoveContainer`` (:407-418) leaves
the set alone, so CPUs of a removed init container stay in it while they are back in the shared pool;
hint generation (:658-672) then counts them twice and requires their NUMA nodes. Allocation takes
from the shared pool and the set together (:423).

The kubelet allocates all of a pod's containers at its admission, back to back, so dropping the other
pods' sets never costs a pod its init CPUs there. Under NRI containers are created when the runtime
runs them, other pods' in between. So:

- the pod whose exclusive allocation ran last (``EngineState.reuse_pod``: the only pod the kubelet
  keeps a set for) reuses the kubelet's set exactly, removed containers' CPUs included;
- any other pod reuses the CPUs of its regular init containers it still holds, where the kubelet
  would reuse none (its set was dropped when the other pod allocated);
- in both cases CPUs another exclusive container holds (an app container or sidecar of the pod, or
  another pod's container) are never reusable: the kubelet makes an init container's CPUs reusable
  again when that container is admitted again after an app container took them, and can then give
  them to a second app container.
"""

from __future__ import annotations

from ..cpuset import EMPTY, CPUSet
from .state import Assignment, EngineState


def _masks(state: EngineState, pod: str) -> tuple[int, int]:
    """(CPUs held by the pod's regular init containers, CPUs held by its other exclusive containers)."""
    init = other = 0
    for a in state.pod_assignments(pod):
        if a.exclusive:
            if a.init and not a.restartable:
                init |= a.current.mask
            else:
                other |= a.current.mask
    return init, other


def usable(state: EngineState, pod: str) -> CPUSet:
    """What an exclusive admission in ``pod`` may take over (hints count these as the kubelet's
    ``reusableCPUs``; allocation takes from the shared pool and these)."""
    raw = state.reusable.get(pod)
    if not raw:
        return EMPTY
    init, other = _masks(state, pod)
    init_only = init & ~other
    held_by_others = state.exclusive_cpus().mask & ~init_only
    mask = raw.mask & ~held_by_others
    if state.reuse_pod != pod:
        mask &= init_only
    return CPUSet.from_mask(mask)


def updated(state: EngineState, a: Assignment, *, allocating: bool = True) -> EngineState:
    """``updateCPUsToReuse`` after ``a``'s exclusive admission (``allocating``), or after ``a`` was
    learnt to be a regular init container (the service learns that late: the kubelet would have
    added its CPUs at its admission; the pod does not become the last allocating pod by it)."""
    reusable = dict(state.reusable)
    reuse_pod = state.reuse_pod
    if allocating and reuse_pod != a.pod:
        if reuse_pod is not None and reuse_pod in reusable:
            # the previous pod keeps only what it still holds (the kubelet would keep nothing)
            kept = reusable.pop(reuse_pod).mask & _init_only(state, reuse_pod)
            if kept:
                reusable[reuse_pod] = CPUSet.from_mask(kept)
        reuse_pod = a.pod
    current = reusable.get(a.pod, EMPTY)
    current = current | a.current if a.init and not a.restartable else current - a.current
    if current:
        reusable[a.pod] = current
    else:
        reusable.pop(a.pod, None)
    return state.with_changes(reusable=reusable, reuse_pod=reuse_pod)


def after_removal(state: EngineState, pod: str, released: CPUSet, last: bool) -> dict[str, CPUSet]:
    """The reusable sets once a container of ``pod`` went and ``released`` returned to the pool
    (``last``: it was the pod's last container). The last allocating pod's set stays as the
    kubelet's does; another pod's keeps only CPUs the pod still holds."""
    reusable = dict(state.reusable)
    if pod == state.reuse_pod:
        return reusable
    left = reusable.pop(pod, EMPTY) - released
    if left and not last:
        reusable[pod] = left
    return reusable


def _init_only(state: EngineState, pod: str) -> int:
    init, other = _masks(state, pod)
    return init & ~other
