"""One admission, end to end: hints → topology merge → static policy → decision.

`Engine.admit(state, request)` is a pure function of its inputs (state in, new state and
decision out), so the service, `simulate`, the property tests and the benchmarks all run
exactly the same path. Rejections are data (`Decision.admitted = False`), not exceptions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..config import Settings
from . import pod_level_admission
from .cpumanager.options import StaticPolicyOptions
from .cpumanager.resize import ResizeDecision, refused
from .cpumanager.resize import resize as resize_container
from .cpumanager.state import EngineState
from .cpumanager.static_policy import StaticPolicy, guaranteed_cpus, reserved_by_count
from .cpuset import EMPTY, CPUSet
from .decision import AdmissionRequest, Decision
from .devicemanager.hints import DeviceHintProvider
from .errors import AdmissionError
from .memorymanager.policy import StaticMemoryPolicy
from .memorymanager.provider import MemoryHintProvider, all_nodes, memory_state
from .memorymanager.state import MemoryState
from .qos import QoS
from .topology.model import Topology
from .topologymanager.cpu_hints import CPUHintProvider
from .topologymanager.explain import HintSummaries, blame, with_preferences
from .topologymanager.hints import (
    HintProvider,
    HintRequest,
    StaticHintProvider,
    TopologyHint,
)
from .topologymanager.merge import MergeResult, Policy, TopologyManager, merge
from .topologymanager.pod_scope import known_pod_hint

__all__ = ["NO_DISTANCES_NOTE", "AdmissionRequest", "Decision", "Engine"]

NO_DISTANCES_NOTE = (
    "prefer-closest-numa-nodes: this machine reports no NUMA distances (the kubelet refuses to start "
    "here); merging without distances instead: the narrowest hint wins, ties go to the lower NUMA nodes")
Shown = Mapping[str, Mapping[str, str]]


class Engine:
    def __init__(self, topology: Topology, policy: StaticPolicy, manager: TopologyManager,
                 scope: str = "container", providers: Sequence[HintProvider] = (), *,
                 devices: bool = False, memory: StaticMemoryPolicy | None = None, mems: str = "aligned",
                 notes: Sequence[str] = ()) -> None:
        if scope not in ("container", "pod"):
            raise ValueError(f"unknown topology manager scope {scope!r}")
        if mems not in ("aligned", "all"):
            raise ValueError(f"mems must be 'aligned' or 'all', got {mems!r}")
        self.topology, self.policy, self.manager, self.scope = topology, policy, manager, scope
        self.extra_providers = tuple(providers)
        self.devices, self.memory, self.mems = devices, memory, mems
        self.all_mems = all_nodes(memory) if memory is not None else tuple(topology.numa_nodes)
        self.notes = tuple(notes)  # configuration facts to warn about once (service log, simulate)
        self._numa_masks = tuple((n, topology.numa_cpus[n].mask) for n in topology.numa_nodes)

    @classmethod
    def from_settings(cls, settings: Settings, topology: Topology, providers: Sequence[HintProvider] = (),
                      memory: StaticMemoryPolicy | None = None) -> Engine:
        """Build from validated settings; `PolicyOptionError` names what the kubelet would refuse.
        ``providers``: the hint providers the caller wires up for ``hints.providers`` beyond the
        engine's own (cpu, devices, and memory when ``memory`` is given)."""
        cm, tm = settings.cpu_manager, settings.topology_manager
        own = {"cpu", "devices"} | ({"memory"} if memory is not None else set())
        unwired = set(settings.hints.providers) - own - {p.name for p in providers}
        if unwired:  # an enabled provider must never be silently absent
            raise ValueError(f"hint provider(s) {sorted(unwired)} enabled but not wired up")
        flags = {name.replace("-", "_"): True for name in cm.policy_options}
        options = StaticPolicyOptions(prefer_isolated_cpus=cm.isolated_cpus == "exclusive-first",
                                      kubelet_release=cm.kubelet_version, **flags)
        reserved = cm.reserved_cpus if cm.reserved_cpus is not None else (
            reserved_by_count(topology, cm.reserved_cpu_count, options) if cm.reserved_cpu_count else EMPTY)
        policy = StaticPolicy(topology, reserved, options, topology_policy_name=tm.policy,
                              core_kinds=cm.core_kinds)
        closest = "prefer-closest-numa-nodes" in tm.policy_options
        notes: list[str] = []
        if closest and not topology.numa_distances:
            notes.append(NO_DISTANCES_NOTE)
            closest = False  # the kernel's 10/20 would give the same answers, only slower
        if tm.max_allowable_numa_nodes is not None:
            notes.append(f"max-allowable-numa-nodes = {tm.max_allowable_numa_nodes}: accepted but not needed; "
                         "nri-pinner merges hints for any number of NUMA nodes")
        manager = TopologyManager.from_topology(topology, tm.policy, prefer_closest_numa_nodes=closest)
        return cls(topology, policy, manager, tm.scope, providers, devices="devices" in settings.hints.providers,
                   memory=memory, mems=settings.memory_manager.mems, notes=notes)

    # -- queries ---------------------------------------------------------------------------------
    def initial_state(self) -> EngineState:
        return self.policy.initial_state()

    def mems_of(self, cpus: CPUSet) -> tuple[int, ...]:
        """NUMA nodes holding any of `cpus`: one mask test per node, not one lookup per CPU (a shared
        pool of 250 CPUs is asked for on every shared container's admission); memory-only nodes
        attached to them join (Memory Manager)."""
        mask = cpus.mask
        nodes = tuple(n for n, node_mask in self._numa_masks if mask & node_mask)
        return self.memory.expand(nodes) if self.memory is not None else nodes

    def memory_mems(self, state: EngineState, pod: str, container: str) -> tuple[int, ...] | None:
        """NUMA nodes of the container's memory blocks (Memory Manager), None when it holds none."""
        if self.memory is None or "memory" not in state.providers:
            return None
        blocks = memory_state(state.providers["memory"]).get(pod, container)
        if not blocks:
            return None
        return self.memory.expand(sorted({n for b in blocks for n in b.numa}))

    @property
    def merges_shared(self) -> bool:
        """False when a non-Guaranteed admission is its shared record alone (topology manager off,
        container scope: no hint merge, no pod affinity), so a rebuild may add those records in bulk."""
        return self.manager.policy is not Policy.NONE or self.scope == "pod"

    # -- admission -------------------------------------------------------------------------------
    def admit(self, state: EngineState, req: AdmissionRequest) -> tuple[EngineState, Decision]:
        qos = QoS.parse(req.qos)
        n = guaranteed_cpus(qos, req.cpu_request_milli, req.cpu_limit_milli)
        merged, shown, blamed, pods_merge = self._merge(state, req, n)
        if merged is not None and not merged.admit:
            error = merged.error
            message = str(error) if error else "topology affinity error"
            if blamed:
                message += f"; cannot be satisfied: {blamed[0]}" + (
                    f" (conflicts with {', '.join(blamed[1:])})" if len(blamed) > 1 else "")
            return state, replace(self._rejected(
                state, req, merged.hint, error.reason if error else "TopologyAffinityError", message),
                provider_hints=shown, blamed=tuple(blamed))
        hint = merged.hint if merged is not None else None
        affinity = hint.affinity if hint is not None else None
        try:
            new_state, alloc = self.policy.allocate(
                state, req.pod, req.container, req.cpu_request_milli, req.cpu_limit_milli, qos,
                init=req.init, restartable=req.restartable, numa_affinity=affinity)
        except AdmissionError as exc:
            return state, replace(self._rejected(state, req, hint, exc.reason, str(exc)), provider_hints=shown)
        mems = self.mems_of(alloc.cpus)
        if self.memory is not None and qos is QoS.GUARANTEED and req.memory:
            try:
                mstate = self.memory.allocate(self._memory_state(state), req.pod, req.container, req.memory,
                                              hint, init=req.init and not req.restartable)
            except AdmissionError as exc:
                return state, replace(self._rejected(state, req, hint, exc.reason, str(exc)),
                                      provider_hints=shown, blamed=("memory",))
            new_state = new_state.with_provider("memory", mstate)
            mems = self.memory_mems(new_state, req.pod, req.container) or mems
        elif not alloc.exclusive and self.mems == "all":
            mems = self.all_mems
        if alloc.exclusive and not alloc.already_assigned and not alloc.shared_pool and not self.policy.reserved:
            # The kubelet requires reserved CPUs for this reason: shared containers need somewhere to run.
            return state, self._rejected(
                state, req, hint, "InsufficientCPUs",
                f"taking {len(alloc.cpus)} exclusive CPUs would leave the shared pool empty; "
                "reserve CPUs (cpu_manager.reserved_cpus or reserved_cpu_count) for shared containers")
        if pods_merge and hint is not None and req.pod_exclusive_cpus is not None:
            # the pod's admission: its later containers get this hint (only a request carrying the
            # pod's totals makes it the pod's; a rebuild's placement has none)
            new_state = new_state.with_pod_hint(req.pod, hint)
        return new_state, Decision(req.pod, req.container, True, alloc.exclusive, alloc.cpus,
                                   mems, alloc.shared_pool, hint, provider_hints=shown)

    def remove(self, state: EngineState, pod: str, container: str) -> EngineState:
        if pod in state.pod_blocks:  # pod scope, pod-level: the block goes back with the last record only
            return pod_level_admission.release(self, state, pod, container)
        state = self.policy.remove(state, pod, container)
        if self.memory is not None and "memory" in state.providers:
            mstate = memory_state(state.providers["memory"])
            if mstate.get(pod, container) is not None:
                state = state.with_provider("memory", self.memory.remove(mstate, pod, container))
        if pod in state.pod_hints and not state.pod_assignments(pod):
            state = state.with_pod_hint(pod, None)  # the pod's last record: its hint goes with it
        return state

    def mark_init(self, state: EngineState, pod: str, container: str) -> EngineState:
        """The container is a regular init container after all (learnt when it stopped): its CPUs and
        memory blocks become reusable by its pod's later containers."""
        state = self.policy.mark_init(state, pod, container)
        if self.memory is not None and "memory" in state.providers:
            mstate = memory_state(state.providers["memory"])
            if mstate.get(pod, container):
                state = state.with_provider("memory", mstate.with_source(pod, container))
        return state

    def _merge(self, state: EngineState, req: AdmissionRequest,
               n: int) -> tuple[MergeResult | None, Shown, list[str], bool]:
        """Merged hint (None: topology manager off), hints shown per provider, the providers a
        rejection is on, and whether the hint is to be the pod's (pod scope: see pod_scope.py)."""
        if self.manager.policy is Policy.NONE:
            return None, {}, [], False
        existing = state.get(req.pod, req.container)
        allocated = existing.current if existing is not None and existing.exclusive else None
        if self.scope == "pod" and allocated is None:
            known, recovered = known_pod_hint(state, req.pod, self.manager)
            if known is not None:  # the pod was admitted: no merge, its hint (kubelet scope_pod.go:55-57)
                return MergeResult(known, True), {}, [], recovered
        providers: list[HintProvider] = [
            CPUHintProvider(self.topology, lambda: self.policy.available_for_exclusive(state),
                            align_by_socket=self.policy.options.align_by_socket),
            StaticHintProvider(), *self.extra_providers]
        if self.scope == "pod":
            request = self._pod_request(state, req, n, allocated)
        else:
            request = HintRequest(
                req.pod, req.container, exclusive_cpus=n, reusable_cpus=self.policy.reusable(state, req.pod),
                allocated_cpus=allocated, static_hints=req.hints)
            # Devices and memory align per container: NRI shows one container at a time.
            if self.devices and req.devices:
                providers.append(DeviceHintProvider(self.manager.numa_nodes, req.devices))
            if self.memory is not None and req.memory and QoS.parse(req.qos) is QoS.GUARANTEED:
                providers.append(MemoryHintProvider(self.memory, self._memory_state(state),
                                                    req.pod, req.container, req.memory))
        answers = [p.hints(request) for p in providers]
        result = merge(self.manager, answers)
        names = [p.name for p in providers]
        shown = HintSummaries(names, answers)
        pods_merge = self.scope == "pod" and allocated is None
        if result.admit:
            return result, shown, [], pods_merge
        return with_preferences(result, names, answers), shown, blame(self.manager, names, answers), False

    def _pod_request(self, state: EngineState, req: AdmissionRequest, n: int,
                     allocated: CPUSet | None) -> HintRequest:
        """The kubelet's GetPodTopologyHints (policy_static.go:578-634) for the pod as it stands: at
        its admission (nothing held yet, or no hint known after a restart), and for a container
        admitted again (a restart: the check of the kubelet's re-admission). The CPUs the pod holds
        count as reusable, or are the hint when they are the whole pod's; a container holding
        another number of CPUs than it asks for gets no CPU hint."""
        total = n if req.pod_exclusive_cpus is None else req.pod_exclusive_cpus
        held = EMPTY
        for a in state.pod_assignments(req.pod):
            if a.exclusive:
                held = held | a.current
        conflict = allocated is not None and len(allocated) != n
        whole = bool(held) and len(held) == total and not conflict
        return HintRequest(req.pod, None, exclusive_cpus=total, static_hints=req.hints, allocation_conflict=conflict,
                           allocated_cpus=held if whole else None,
                           reusable_cpus=EMPTY if whole else self.policy.reusable(state, req.pod) | held)

    def _memory_state(self, state: EngineState) -> MemoryState:
        """Memory state for a decision; init containers found to be sidecars (restartable: the
        service learns it late) lend no memory, as the kubelet never reuses theirs."""
        mstate = memory_state(state.providers.get("memory"))
        if not mstate.sources:
            return mstate
        return mstate.without_sources(frozenset(
            k for k in mstate.sources if (a := state.get(*k)) is not None and a.restartable))

    def _rejected(self, state: EngineState, req: AdmissionRequest, hint: TopologyHint | None,
                  reason: str, message: str) -> Decision:
        return Decision(req.pod, req.container, False, False, EMPTY, (), self.policy.shared_pool(state), hint,
                        reason, message)

    # -- in-place resize (engine only; see cpumanager/resize.py) ---------------------------------
    def resize(self, state: EngineState, pod: str, container: str, qos: QoS | str,
               cpu_request_milli: int | None, cpu_limit_milli: int | None,
               like: AdmissionRequest | None = None) -> tuple[EngineState, ResizeDecision]:
        """Apply a new CPU request/limit to an admitted container; refusals are data (state unchanged).
        ``like``: what a create of this container would be asked (devices, pod total, hints), for
        the fresh admission of fractional -> integer; its CPU values and memory are not used."""
        a = state.get(pod, container)
        n = guaranteed_cpus(QoS.parse(qos), cpu_request_milli, cpu_limit_milli)
        if a is not None and not a.exclusive and n > 0:
            # shared -> exclusive is a fresh exclusive admission, aligned as a create is
            request = replace(like or AdmissionRequest(pod, container, qos), pod=pod, container=container, qos=qos,
                              cpu_request_milli=cpu_request_milli or 0, cpu_limit_milli=cpu_limit_milli or 0,
                              init=a.init, restartable=a.restartable, memory=self._held_memory(state, pod, container))
            new_state, d = self.admit(state.with_changes(drop=a.key), request)
            if not d.admitted:
                return state, refused(state, a, pod, container, AdmissionError(d.message, d.reason))
            return new_state, ResizeDecision(pod, container, True, "to-exclusive", True, d.cpus, EMPTY, d.cpus,
                                             EMPTY, d.shared, d.mems)
        try:
            new_state, rd = resize_container(self.policy, state, pod, container, qos, cpu_request_milli,
                                             cpu_limit_milli, affinity_policy=self.manager.policy.value)
        except AdmissionError as exc:
            return state, refused(state, a, pod, container, exc)
        return new_state, replace(rd, mems=self.mems_of(rd.cpus))

    def _held_memory(self, state: EngineState, pod: str, container: str) -> dict[str, int]:
        """The memory request of the blocks the container holds ({} when none). Asked again with it,
        the memory provider hints the blocks' own nodes (the kubelet's regenerateHints: strict
        policies refuse CPUs elsewhere, best-effort prefers them) and allocates nothing new. A
        resize never allocates memory: a container holding none brings no memory constraint."""
        if self.memory is None or "memory" not in state.providers:
            return {}
        blocks = memory_state(state.providers["memory"]).get(pod, container) or ()
        held: dict[str, int] = {}
        for b in blocks:
            held[b.type] = held.get(b.type, 0) + b.size
        return held
