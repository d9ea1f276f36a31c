"""In-place resize of one container's CPUs, as pure functions over ``EngineState``.

Rules (from the kubelet's KEP-5554 work, see README "Resize"):

* grow: every CPU the container holds stays; the new ones come from the free exclusive pool,
  next to the held ones (``take_by_topology_for_resize``); under full-pcpus-only only whole
  free cores are candidates, so the set stays whole cores;
* shrink: the admitted baseline stays; the CPUs added later are chosen again, packed next to
  the baseline, and the rest go back to the pool. Below the baseline is refused, as upstream;
* class change within Guaranteed: integer -> fractional releases every exclusive CPU (the
  container follows the shared pool); fractional -> integer is a fresh exclusive allocation
  that becomes the new baseline. Non-Guaranteed containers are never made exclusive, and a
  QoS class change of an exclusive container is refused (the kubelet refuses them too);
* topology policy: restricted / single-numa-node refuse a grow that leaves the container's
  NUMA affinity (the held assignment's ``numa_affinity``, else the nodes it holds);
  best-effort grows inside the affinity when it fits there, else as close as it can.

Nothing here hands a CPU the container keeps to anyone, and nothing takes a CPU another
container holds: a grow only takes free CPUs, a shrink only gives back the container's own.
A refusal raises an ``AdmissionError`` and leaves the given state untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..cpuset import EMPTY, CPUSet
from ..errors import AdmissionError, InsufficientCPUs, SMTAlignmentError, TopologyAffinityError
from ..qos import QoS
from .index import index_for
from .resize_allocator import take_by_topology_for_resize
from .state import Assignment, EngineState
from .static_policy import StaticPolicy, guaranteed_cpus

STRICT_POLICIES = ("restricted", "single-numa-node")
AFFINITY_POLICIES = ("none", "best-effort", *STRICT_POLICIES)


class ResizeError(AdmissionError):
    """A resize the engine refuses for a reason other than room (unknown container, QoS change, baseline)."""

    reason = "ResizeRefused"


@dataclass(frozen=True)
class ResizeDecision:
    """Outcome of a resize: the container's cpuset after it and what changed.

    ``kind`` is one of unchanged, grow, shrink, to-exclusive, to-shared, shared (a
    non-exclusive container stays in the shared pool). ``kept`` are CPUs it had and keeps,
    ``added`` new exclusive CPUs, ``released`` CPUs it gave back. Refused: ``applied`` False,
    ``cpus`` its unchanged set, ``reason``/``message`` say why.
    """

    pod: str
    container: str
    applied: bool
    kind: str
    exclusive: bool
    cpus: CPUSet
    kept: CPUSet
    added: CPUSet
    released: CPUSet
    shared: CPUSet
    mems: tuple[int, ...] = ()
    reason: str = ""
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pod": self.pod, "container": self.container, "applied": self.applied, "kind": self.kind,
            "exclusive": self.exclusive, "cpus": str(self.cpus), "mems": ",".join(map(str, self.mems)),
            "kept": str(self.kept), "added": str(self.added), "released": str(self.released),
            "shared": str(self.shared),
        }
        if not self.applied:
            out["reason"], out["message"] = self.reason, self.message
        return out


def refused(state: EngineState, a: Assignment | None, pod: str, container: str, exc: AdmissionError
            ) -> ResizeDecision:
    """The decision for a refused resize: the container keeps what it has."""
    exclusive = a is not None and a.exclusive
    cpus = a.current if a is not None and a.exclusive else state.default_set
    kind = "unchanged" if a is not None else "unknown"
    return ResizeDecision(pod, container, False, kind, exclusive, cpus, cpus if exclusive else EMPTY,
                          EMPTY, EMPTY, state.default_set, reason=exc.reason, message=str(exc))


def resize(
    policy: StaticPolicy,
    state: EngineState,
    pod: str,
    container: str,
    qos: QoS | str,
    cpu_request_milli: int | None,
    cpu_limit_milli: int | None,
    *,
    affinity_policy: str = "none",
) -> tuple[EngineState, ResizeDecision]:
    """Apply a new CPU request/limit to an admitted container; raise ``AdmissionError`` to refuse."""
    if affinity_policy not in AFFINITY_POLICIES:
        raise ValueError(f"unknown topology manager policy {affinity_policy!r}")
    a = state.get(pod, container)
    if a is None:
        raise ResizeError(f"container {container!r} of pod {pod!r} was never admitted; nothing to resize",
                          "UnknownContainer")
    qos = QoS.parse(qos)
    n = guaranteed_cpus(qos, cpu_request_milli, cpu_limit_milli)
    if a.exclusive and qos is not QoS.GUARANTEED:
        raise ResizeError(f"container {container!r} of pod {pod!r} holds exclusive CPUs {a.current}; "
                          f"a resize cannot change its QoS class to {qos.value}", "QoSClassChange")
    if not a.exclusive and n == 0:
        return state, ResizeDecision(pod, container, True, "shared", False, state.default_set, EMPTY,
                                     EMPTY, EMPTY, state.default_set)
    if not a.exclusive:
        return _to_exclusive(policy, state, a, qos, cpu_request_milli, cpu_limit_milli)
    if n == 0:
        return _to_shared(policy, state, a)
    if n == len(a.current):
        return state, ResizeDecision(pod, container, True, "unchanged", True, a.current, a.current,
                                     EMPTY, EMPTY, state.default_set)
    group = index_for(policy.topology).cpus_per_core
    if policy.options.full_pcpus_only and n % group:
        raise SMTAlignmentError(n, group)
    if n > len(a.current):
        return _grow(policy, state, a, n, affinity_policy)
    return _shrink(policy, state, a, n)


def _take(policy: StaticPolicy, available: CPUSet, retained: CPUSet, n: int) -> CPUSet:
    opts = policy.options
    return take_by_topology_for_resize(
        policy.topology, available, retained, n,
        distribute_cpus_across_numa=opts.distribute_cpus_across_numa,
        distribute_cpus_across_cores=opts.distribute_cpus_across_cores,
        prefer_align_by_uncore_cache=opts.prefer_align_cpus_by_uncorecache,
        cpu_group_size=index_for(policy.topology).cpus_per_core if opts.full_pcpus_only else 1,
    )


def _whole_free_cores(policy: StaticPolicy, pool: CPUSet) -> CPUSet:
    idx = index_for(policy.topology)
    mask = 0
    for core in idx.core_mask.values():
        if core & ~pool.mask == 0:
            mask |= core
    return CPUSet.from_mask(mask)


def affinity_cpus(policy: StaticPolicy, a: Assignment) -> CPUSet:
    """CPUs of the container's NUMA affinity (its admitted hint, else the nodes it holds)."""
    topo = policy.topology
    if a.numa_affinity is not None:
        nodes = [node for node in topo.numa_nodes if a.numa_affinity >> node & 1]
    else:
        nodes = topo.numa_of(a.current & topo.all_cpus)
    cpus = topo.cpus_in_numa(nodes)
    if policy.options.align_by_socket:
        mask = 0
        for s in {topo.by_cpu[c].socket for c in cpus}:
            mask |= topo.socket_cpus[s].mask
        cpus = CPUSet.from_mask(mask)
    return cpus


def _grow(policy: StaticPolicy, state: EngineState, a: Assignment, n: int, affinity_policy: str
          ) -> tuple[EngineState, ResizeDecision]:
    pool = policy.available_for_exclusive(state) - a.current
    if policy.options.full_pcpus_only:
        pool = _whole_free_cores(policy, pool)
        if n - len(a.current) > len(pool):
            raise SMTAlignmentError(n, index_for(policy.topology).cpus_per_core, len(pool) + len(a.current),
                                    caused_by_physical_cpus=True)
    extra = n - len(a.current)
    if affinity_policy != "none" and (a.numa_affinity is not None or affinity_policy in STRICT_POLICIES):
        aligned = pool & affinity_cpus(policy, a)
        if len(aligned) >= extra:
            pool = aligned
        elif affinity_policy in STRICT_POLICIES:
            raise TopologyAffinityError(
                f"growing to {n} CPUs needs {extra} more inside NUMA affinity "
                f"{policy.topology.numa_of(affinity_cpus(policy, a))} but only {len(aligned)} are free there "
                f"(topology manager policy {affinity_policy})")
    if extra > len(pool):
        raise InsufficientCPUs(n, len(pool) + len(a.current))
    new = _take(policy, pool, a.current, n)
    added = new - a.current
    default = state.default_set - added
    if not default and not policy.reserved and state.default_set:
        raise InsufficientCPUs(n, len(pool) + len(a.current),
                               f"growing to {n} exclusive CPUs would leave the shared pool empty; reserve CPUs "
                               "(cpu_manager.reserved_cpus or reserved_cpu_count) for shared containers")
    new_state = state.with_changes(default_set=default, put=replace(a, current=new))
    return new_state, ResizeDecision(a.pod, a.container, True, "grow", True, new, a.current, added, EMPTY,
                                     default)


def _release(policy: StaticPolicy, state: EngineState, a: Assignment, released: CPUSet, put: Assignment
             ) -> EngineState:
    held = 0
    for other in state.pod_assignments(a.pod):
        if other.key != a.key:
            held |= other.current.mask
    to_pool = released - CPUSet.from_mask(held)
    reusable = dict(state.reusable)
    if a.pod in reusable:
        left = reusable.pop(a.pod) - to_pool
        if left:
            reusable[a.pod] = left
    default = state.default_set | (to_pool & policy.managed_shared)
    return state.with_changes(default_set=default, put=put, reusable=reusable)


def _shrink(policy: StaticPolicy, state: EngineState, a: Assignment, n: int) -> tuple[EngineState, ResizeDecision]:
    baseline = a.admitted & a.current
    if n < len(baseline):
        raise ResizeError(f"cannot shrink container {a.container!r} of pod {a.pod!r} to {n} CPUs: it was "
                          f"admitted with {len(baseline)} ({baseline}) and keeps them", "ResizeBelowBaseline")
    new = _take(policy, a.current - baseline, baseline, n)
    released = a.current - new
    new_state = _release(policy, state, a, released, replace(a, current=new))
    return new_state, ResizeDecision(a.pod, a.container, True, "shrink", True, new, new, EMPTY, released,
                                     new_state.default_set)


def _to_shared(policy: StaticPolicy, state: EngineState, a: Assignment) -> tuple[EngineState, ResizeDecision]:
    put = replace(a, admitted=EMPTY, current=EMPTY, exclusive=False)
    new_state = _release(policy, state, a, a.current, put)
    return new_state, ResizeDecision(a.pod, a.container, True, "to-shared", False, new_state.default_set,
                                     EMPTY, EMPTY, a.current, new_state.default_set)


def _to_exclusive(policy: StaticPolicy, state: EngineState, a: Assignment, qos: QoS, req: int | None,
                  lim: int | None) -> tuple[EngineState, ResizeDecision]:
    without = state.with_changes(drop=a.key)
    new_state, alloc = policy.allocate(without, a.pod, a.container, req, lim, qos, init=a.init,
                                       restartable=a.restartable, numa_affinity=a.numa_affinity)
    if not alloc.shared_pool and not policy.reserved:
        raise InsufficientCPUs(len(alloc.cpus), len(alloc.cpus),
                               f"taking {len(alloc.cpus)} exclusive CPUs would leave the shared pool empty; "
                               "reserve CPUs (cpu_manager.reserved_cpus or reserved_cpu_count) for shared containers")
    return new_state, ResizeDecision(a.pod, a.container, True, "to-exclusive", True, alloc.cpus, EMPTY,
                                     alloc.cpus, EMPTY, new_state.default_set)
