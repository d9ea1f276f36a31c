"""The kubelet's CPU Manager static policy, as pure functions over ``EngineState``.

Pools, as in the kubelet: SHARED (``state.default_set``: Burstable, BestEffort and
non-integer Guaranteed containers), RESERVED (part of SHARED unless
strict-cpu-reservation; never exclusive) and EXCLUSIVE sets of Guaranteed containers
with an integer CPU request. Exclusive CPUs come from SHARED minus RESERVED, plus the
CPUs of the pod's init containers (``cpusToReuse``), restricted first to the NUMA
nodes (or, with align-by-socket, the sockets) of the topology hint.

Our additions: isolated CPUs (``isolcpus``) are never in the shared pool. With
``prefer_isolated_cpus=True`` exclusive allocations take free isolated CPUs first
(inside each NUMA-restriction step); with False isolated CPUs are never handed out.
Offline CPUs are in no pool. ``start`` repairs an inconsistent state instead of
refusing to run.

Admitting a (pod, container) again follows the kubelet: the full-pcpus-only checks run
first (so they can refuse a container already pinned when too few whole cores are free),
then a container holding exclusive CPUs keeps them; one recorded as shared that is now
Guaranteed gets exclusive CPUs. Reusable init CPUs: see ``reuse`` (the kubelet's set for the
pod that allocated last; per pod otherwise; never CPUs another container holds).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cpuset import EMPTY, CPUSet
from ..errors import InsufficientCPUs, PolicyOptionError, SMTAlignmentError
from ..qos import QoS
from ..topology.model import Topology
from . import core_kinds as core_kinds_mod
from . import reuse
from .allocator import take_by_topology
from .index import index_for
from .options import StaticPolicyOptions
from .state import Assignment, EngineState


@dataclass(frozen=True)
class AllocationDecision:
    """Outcome of ``allocate``: the container's CPUs and the shared pool after the decision."""

    pod: str
    container: str
    cpus: CPUSet  # exclusive set, or the shared pool for shared containers
    exclusive: bool
    already_assigned: bool
    reused: CPUSet  # CPUs taken over from the pod's init containers
    shared_pool: CPUSet


def guaranteed_cpus(qos: QoS | str, request_milli: int | None, limit_milli: int | None) -> int:
    """Exclusive CPU count: Guaranteed, request == limit, a positive whole number of CPUs; else 0."""
    if QoS.parse(qos) is not QoS.GUARANTEED or request_milli is None or request_milli != limit_milli:
        return 0
    if request_milli <= 0 or request_milli % 1000:
        return 0
    return request_milli // 1000


def reserved_by_count(topology: Topology, n: int, options: StaticPolicyOptions | None = None) -> CPUSet:
    """N reserved CPUs taken by topology from the lowest cores (as the kubelet's reservedSystemCPUs count).

    Isolated CPUs are not candidates: they could never serve system daemons.
    """
    opts = options or StaticPolicyOptions()
    candidates = topology.online - topology.isolated
    try:
        return _take(topology, opts, candidates, n)
    except InsufficientCPUs as exc:
        raise PolicyOptionError(f"[cpumanager] unable to reserve the required amount of CPUs: {exc}") from exc


def _take(topology: Topology, opts: StaticPolicyOptions, available: CPUSet, n: int) -> CPUSet:
    return take_by_topology(
        topology,
        available,
        n,
        full_pcpus_only=opts.full_pcpus_only,
        distribute_cpus_across_numa=opts.distribute_cpus_across_numa,
        distribute_cpus_across_cores=opts.distribute_cpus_across_cores,
        prefer_align_by_uncore_cache=opts.prefer_align_cpus_by_uncorecache,
        odd_smt_uncore=opts.odd_smt_partial_uncore,
    )


class StaticPolicy:
    def __init__(
        self,
        topology: Topology,
        reserved: CPUSet = EMPTY,
        options: StaticPolicyOptions | None = None,
        topology_policy_name: str = "none",
        core_kinds: str = core_kinds_mod.DEFAULT,
    ) -> None:
        self.topology = topology
        self.core_kinds = core_kinds
        self.options = options or StaticPolicyOptions()
        self.options.validate(topology, topology_policy_name)
        if not reserved.issubset(topology.online):
            raise PolicyOptionError(f"reserved CPUs {reserved - topology.online} are not online CPUs")
        if not reserved.isdisjoint(topology.isolated):
            raise PolicyOptionError(
                f"reserved CPUs {reserved & topology.isolated} are isolated; "
                "reserve CPUs that system daemons can run on"
            )
        self.reserved = reserved
        mask = 0
        for cpu in reserved:
            mask |= topology.siblings(cpu).mask
        self.reserved_physical = CPUSet.from_mask(mask) & topology.online
        self.cpu_group_size = index_for(topology).cpus_per_core
        # CPUs the shared pool may ever hold.
        self.managed_shared = topology.online - topology.isolated
        if self.options.strict_cpu_reservation:
            self.managed_shared = self.managed_shared - reserved

    # -- pools -------------------------------------------------------------------------------------
    def initial_state(self) -> EngineState:
        return EngineState(default_set=self.managed_shared)

    def shared_pool(self, state: EngineState) -> CPUSet:
        return state.default_set

    def free_isolated(self, state: EngineState) -> CPUSet:
        held = state.exclusive_cpus()
        for b in state.pod_blocks.values():  # a pod's block is held whole, its pod pool included
            held = held | b.block
        return self.topology.isolated - held

    def available_for_exclusive(self, state: EngineState) -> CPUSet:
        """Free CPUs an exclusive allocation may take: shared pool minus reserved, plus free isolated if used."""
        avail = state.default_set - self.reserved
        if self.options.prefer_isolated_cpus:
            avail = avail | self.free_isolated(state)
        return avail

    def reusable(self, state: EngineState, pod: str) -> CPUSet:
        """CPUs of the pod's init containers its next exclusive container may take over."""
        return reuse.usable(state, pod)

    # -- admission -------------------------------------------------------------------------------
    def allocate(
        self,
        state: EngineState,
        pod: str,
        container: str,
        cpu_request_milli: int | None,
        cpu_limit_milli: int | None,
        qos: QoS | str,
        init: bool = False,
        restartable: bool = False,
        numa_affinity: int | None = None,
    ) -> tuple[EngineState, AllocationDecision]:
        """Admit one container; raises an ``AdmissionError`` (state untouched) when it cannot be placed."""
        n = guaranteed_cpus(qos, cpu_request_milli, cpu_limit_milli)
        existing = state.get(pod, container)
        if n == 0:
            if existing is not None:  # the kubelet has nothing to do: whatever it holds stays
                return state, self._decision(state, existing, already=True)
            shared = Assignment(
                pod,
                container,
                EMPTY,
                EMPTY,
                exclusive=False,
                init=init,
                restartable=restartable,
                numa_affinity=numa_affinity,
            )
            new_state = state.with_changes(put=shared)
            return new_state, self._decision(new_state, shared, already=False)

        # As the kubelet: the SMT checks come before "already present", and only exclusive
        # CPUs count as present (a container first seen as shared gets exclusive CPUs now).
        self.enforce_smt_alignment(state, n)
        if existing is not None and existing.exclusive:
            new_state = reuse.updated(state, existing)
            return new_state, self._decision(new_state, existing, already=True)
        reusable = self.reusable(state, pod)
        cpus = self.allocate_cpus(state, n, numa_affinity, reusable)
        assignment = Assignment(
            pod,
            container,
            cpus,
            cpus,
            exclusive=True,
            init=init,
            restartable=restartable,
            numa_affinity=numa_affinity,
        )
        new_state = reuse.updated(state.hold(assignment), assignment)
        reused = cpus & reusable & state.exclusive_cpus()  # (not the free CPUs of a removed init container)
        return new_state, self._decision(new_state, assignment, already=False, reused=reused)

    def _decision(
        self, state: EngineState, a: Assignment, already: bool, reused: CPUSet = EMPTY
    ) -> AllocationDecision:
        cpus = a.current if a.exclusive else state.default_set
        return AllocationDecision(a.pod, a.container, cpus, a.exclusive, already, reused, state.default_set)

    def enforce_smt_alignment(self, state: EngineState, n: int) -> None:
        if not self.options.full_pcpus_only:
            return
        if n % self.cpu_group_size:
            raise SMTAlignmentError(n, self.cpu_group_size)
        physical = state.default_set - self.reserved_physical
        if self.options.prefer_isolated_cpus:
            physical = physical | self.free_isolated(state)
        if n > len(physical):
            raise SMTAlignmentError(n, self.cpu_group_size, len(physical), caused_by_physical_cpus=True)

    def allocate_cpus(
        self, state: EngineState, n: int, numa_affinity: int | None, reusable: CPUSet
    ) -> CPUSet:
        allocatable = self.available_for_exclusive(state) | reusable
        allocatable = core_kinds_mod.pool_for(self.topology, allocatable, n, self.core_kinds)
        result = EMPTY
        if numa_affinity is not None:
            aligned = allocatable & self._aligned_cpus(numa_affinity)
            result = self.take_preferring_isolated(aligned, min(n, len(aligned)))
        return result | self.take_preferring_isolated(allocatable - result, n - len(result))

    def _aligned_cpus(self, numa_affinity: int) -> CPUSet:
        nodes = [node for node in self.topology.numa_nodes if numa_affinity >> node & 1]
        cpus = self.topology.cpus_in_numa(nodes)
        if self.options.align_by_socket:
            sockets = {self.topology.by_cpu[c].socket for c in cpus}
            mask = 0
            for s in sockets:
                mask |= self.topology.socket_cpus[s].mask
            cpus = CPUSet.from_mask(mask)
        return cpus

    def take_preferring_isolated(self, available: CPUSet, n: int) -> CPUSet:
        if n > len(available):
            raise InsufficientCPUs(n, len(available))
        isolated = available & self.topology.isolated
        if not self.options.prefer_isolated_cpus or not isolated:
            return _take(self.topology, self.options, available, n)
        k = min(n, len(isolated))
        if self.options.full_pcpus_only:
            k -= k % self.cpu_group_size
        first = _take(self.topology, self.options, isolated, k)
        return first | _take(self.topology, self.options, available - isolated - first, n - k)

    def mark_init(self, state: EngineState, pod: str, container: str) -> EngineState:
        """A container learnt to be a regular init container after its admission (the service tells
        init from app when it stops): its CPUs become reusable by its pod's next containers, as
        ``updateCPUsToReuse`` (kubelet v1.32 policy_static.go:285) would have made them at its Allocate."""
        a = state.get(pod, container)
        if a is None or (a.init and not a.restartable):
            return state
        a = Assignment(a.pod, a.container, a.admitted, a.current, a.exclusive, True, False, a.numa_affinity)
        state = state.with_changes(put=a)
        return reuse.updated(state, a, allocating=False) if a.exclusive else state

    # -- removal and restart -----------------------------------------------------------------------
    def remove(self, state: EngineState, pod: str, container: str) -> EngineState:
        """Forget a container and return the exclusive CPUs no sibling still holds to their pool."""
        a = state.get(pod, container)
        if a is None:
            return state
        in_use = 0
        for other in state.pod_assignments(pod):
            if other.key != a.key:
                in_use |= other.current.mask
        released = a.current - CPUSet.from_mask(in_use) if a.exclusive else EMPTY
        reusable = reuse.after_removal(state, pod, released, last=len(state.pod_assignments(pod)) == 1)
        default = state.default_set | (released & self.managed_shared)
        return state.with_changes(default_set=default, drop=a.key, reusable=reusable)

    def start(self, state: EngineState) -> tuple[EngineState, list[str]]:
        """Make a loaded state consistent with this topology and configuration; return it plus what was fixed.

        Where the kubelet's ``validateState`` refuses to start, this repairs and reports:
        exclusive sets lose CPUs that are offline, reserved, or (without
        prefer_isolated_cpus) isolated, and CPUs another container already holds; empty
        exclusive sets are dropped; the shared pool is recomputed from the rest.
        """
        msgs: list[str] = []
        allowed = self.topology.online - self.reserved
        if not self.options.prefer_isolated_cpus:
            allowed = allowed - self.topology.isolated
        fixed: dict[tuple[str, str], Assignment] = {}
        kept: list[Assignment] = []  # the exclusive ones in `fixed` (a node has far more shared ones)
        for key, a in sorted(state.assignments.items()):
            if not a.exclusive:
                if a.current or a.admitted:
                    msgs.append(
                        f"pod: {a.pod}, container: {a.container} is shared but recorded CPUs "
                        f'"{a.current}"; cleared'
                    )
                    a = Assignment(a.pod, a.container, EMPTY, EMPTY, False, a.init, a.restartable, a.numa_affinity)
                fixed[key] = a  # (records are immutable: an unchanged one is kept, not copied)
                continue
            keep = a.current & allowed
            if keep != a.current:
                msgs.append(
                    f'pod: {a.pod}, container: {a.container} cpuset: "{a.current}" holds CPUs '
                    f'"{a.current - keep}" that are offline, reserved or isolated; dropped them'
                )
            for other in kept:
                if keep & other.current and not _may_share(a, other):
                    msgs.append(
                        f'pod: {a.pod}, container: {a.container} cpuset: "{keep}" overlaps with '
                        f'pod: {other.pod}, container: {other.container} cpuset: "{other.current}"; '
                        "the first keeps them"
                    )
                    keep = keep - other.current
            if not keep:
                msgs.append(
                    f"pod: {a.pod}, container: {a.container} has no usable exclusive CPUs left; "
                    "assignment dropped"
                )
                continue
            fixed[key] = Assignment(
                a.pod, a.container, a.admitted, keep, True, a.init, a.restartable, a.numa_affinity
            )
            kept.append(fixed[key])
        exclusive = EngineState(assignments=fixed).exclusive_cpus()
        default = self.managed_shared - exclusive
        msgs.extend(self._default_set_diagnosis(state, exclusive))
        if default != state.default_set:
            msgs.append(f'shared pool repaired: "{state.default_set}" -> "{default}"')
        # reusable CPUs: those the pod holds; the last allocating pod's set also keeps free ones (reuse)
        reusable: dict[str, CPUSet] = {}
        for pod, cpus in state.reusable.items():
            held = 0
            for a in fixed.values():
                if a.pod == pod:
                    held |= a.current.mask
            keep = cpus & CPUSet.from_mask(held)
            if pod == state.reuse_pod:
                keep = keep | (cpus & (allowed - exclusive))
            if keep:
                reusable[pod] = keep
        pods = {a.pod for a in fixed.values()} if state.pod_hints else set()
        hints = {pod: h for pod, h in state.pod_hints.items() if pod in pods}  # (kept with the pod's records)
        return EngineState(default_set=default, assignments=fixed, reusable=reusable, reuse_pod=state.reuse_pod,
                           pod_hints=hints), msgs

    def _default_set_diagnosis(self, state: EngineState, exclusive: CPUSet) -> list[str]:
        """The kubelet's validateState complaints about the stored shared pool, worded as it words them."""
        default = state.default_set
        msgs: list[str] = []
        if not default and state.assignments:
            if self.managed_shared - exclusive:  # legitimately empty when exclusive sets took everything
                msgs.append("default cpuset cannot be empty")
        elif default:
            if self.options.strict_cpu_reservation and self.reserved & default:
                msgs.append(
                    f'some of strictly reserved cpus: "{self.reserved & default}" are present in '
                    f'defaultCpuSet: "{default}"'
                )
            if not self.options.strict_cpu_reservation and not self.reserved.issubset(default):
                msgs.append(
                    f'not all reserved cpus: "{self.reserved}" are present in defaultCpuSet: "{default}"'
                )
            for a in sorted(state.assignments.values(), key=lambda x: x.key):
                if a.current & default:
                    msgs.append(
                        f'pod: {a.pod}, container: {a.container} cpuset: "{a.current}" overlaps with '
                        f'default cpuset "{default}"'
                    )
            known = default | state.exclusive_cpus()
            expected = self.managed_shared | exclusive
            if known != expected:
                msgs.append(
                    f'current set of available CPUs "{expected}" doesn\'t match with CPUs in state "{known}"'
                )
        return msgs


def _may_share(a: Assignment, b: Assignment) -> bool:
    """Two exclusive sets may overlap only inside one pod when one is a (non-restartable) init container."""
    return a.pod == b.pod and ((a.init and not a.restartable) or (b.init and not b.restartable))
