"""One admission, end to end: hints → topology merge → static policy → decision.

`Engine.admit(state, request)` is a pure function of its inputs (state in, new state and
decision out), so the service, `simulate`, the property tests and the benchmarks all run
exactly the same path. Rejections are data (`Decision.admitted = False`), not exceptions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..config import Settings
from .cpumanager.options import StaticPolicyOptions
from .cpumanager.state import EngineState
from .cpumanager.static_policy import StaticPolicy, guaranteed_cpus, reserved_by_count
from .cpuset import EMPTY, CPUSet
from .devicemanager.hints import Device, DeviceHintProvider
from .errors import AdmissionError
from .memorymanager.policy import StaticMemoryPolicy
from .memorymanager.provider import MemoryHintProvider, all_nodes, memory_state
from .qos import QoS
from .topology.model import Topology
from .topologymanager.cpu_hints import CPUHintProvider
from .topologymanager.explain import blame, summarize
from .topologymanager.hints import HintProvider, HintRequest, ResourceHints, StaticHintProvider, TopologyHint, nodes_of
from .topologymanager.merge import MergeResult, Policy, TopologyManager, merge


@dataclass(frozen=True)
class AdmissionRequest:
    pod: str
    container: str
    qos: QoS | str  # any spelling QoS.parse accepts; stored as QoS
    cpu_request_milli: int = 0
    cpu_limit_milli: int = 0
    init: bool = False
    restartable: bool = False
    hints: ResourceHints = field(default_factory=dict)  # from other resources (devices, simulate)
    pod_exclusive_cpus: int | None = None  # pod scope: the pod's total; default: this container's
    devices: Mapping[str, Sequence[Device]] = field(default_factory=dict)  # resource -> devices it holds
    memory: Mapping[str, int] = field(default_factory=dict)  # "memory"/"hugepages-<size>" -> bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "qos", QoS.parse(self.qos))


@dataclass(frozen=True)
class Decision:
    pod: str
    container: str
    admitted: bool
    exclusive: bool
    cpus: CPUSet  # the container's cpuset: its exclusive CPUs or the shared pool; empty when rejected
    mems: tuple[int, ...]  # NUMA nodes for cpuset.mems
    shared: CPUSet  # the shared pool after this decision
    hint: TopologyHint | None = None  # merged hint (None when the topology manager is off)
    reason: str = ""
    message: str = ""
    provider_hints: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # provider -> resource -> hints
    blamed: tuple[str, ...] = ()  # providers a rejection is on

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pod": self.pod, "container": self.container, "admitted": self.admitted,
            "exclusive": self.exclusive, "cpus": str(self.cpus), "mems": ",".join(map(str, self.mems)),
            "shared": str(self.shared),
            "hint": None if self.hint is None else {
                "numa": None if self.hint.affinity is None else nodes_of(self.hint.affinity),
                "preferred": self.hint.preferred},
        }
        if not self.admitted:
            out["reason"], out["message"] = self.reason, self.message
        return out

    def explain(self) -> dict[str, Any]:
        """Each provider's hints (and, for a rejection, the providers it is on) for ``status``."""
        out: dict[str, Any] = {}
        if self.provider_hints:
            out["provider_hints"] = {k: dict(v) for k, v in self.provider_hints.items()}
        if self.blamed:
            out["blamed"] = list(self.blamed)
        return out


class Engine:
    def __init__(self, topology: Topology, policy: StaticPolicy, manager: TopologyManager,
                 scope: str = "container", providers: Sequence[HintProvider] = (), *,
                 devices: bool = False, memory: StaticMemoryPolicy | None = None, mems: str = "aligned") -> None:
        if scope not in ("container", "pod"):
            raise ValueError(f"unknown topology manager scope {scope!r}")
        if mems not in ("aligned", "all"):
            raise ValueError(f"mems must be 'aligned' or 'all', got {mems!r}")
        self.topology, self.policy, self.manager, self.scope = topology, policy, manager, scope
        self.extra_providers = tuple(providers)
        self.devices, self.memory, self.mems = devices, memory, mems
        self.all_mems = all_nodes(memory) if memory is not None else tuple(topology.numa_nodes)

    @classmethod
    def from_settings(cls, settings: Settings, topology: Topology,
                      memory: StaticMemoryPolicy | None = None) -> Engine:
        """Build from validated settings; `PolicyOptionError` names what the kubelet would refuse."""
        cm, tm = settings.cpu_manager, settings.topology_manager
        flags = {name.replace("-", "_"): True for name in cm.policy_options}
        options = StaticPolicyOptions(prefer_isolated_cpus=cm.isolated_cpus == "exclusive-first", **flags)
        reserved = cm.reserved_cpus if cm.reserved_cpus is not None else (
            reserved_by_count(topology, cm.reserved_cpu_count, options) if cm.reserved_cpu_count else EMPTY)
        policy = StaticPolicy(topology, reserved, options, topology_policy_name=tm.policy)
        manager = TopologyManager.from_topology(
            topology, tm.policy, prefer_closest_numa_nodes="prefer-closest-numa-nodes" in tm.policy_options)
        return cls(topology, policy, manager, tm.scope, devices="devices" in settings.hints.providers,
                   memory=memory, mems=settings.memory_manager.mems)

    # -- queries ---------------------------------------------------------------------------------
    def initial_state(self) -> EngineState:
        return self.policy.initial_state()

    def mems_of(self, cpus: CPUSet) -> tuple[int, ...]:
        nodes = tuple(self.topology.numa_of(cpus & self.topology.all_cpus))
        return self.memory.expand(nodes) if self.memory is not None else nodes

    def memory_mems(self, state: EngineState, pod: str, container: str) -> tuple[int, ...] | None:
        """NUMA nodes of the container's memory blocks (Memory Manager), None when it holds none."""
        if self.memory is None or "memory" not in state.providers:
            return None
        blocks = memory_state(state.providers["memory"]).get(pod, container)
        if not blocks:
            return None
        return self.memory.expand(sorted({n for b in blocks for n in b.numa}))

    # -- admission -------------------------------------------------------------------------------
    def admit(self, state: EngineState, req: AdmissionRequest) -> tuple[EngineState, Decision]:
        qos = QoS.parse(req.qos)
        n = guaranteed_cpus(qos, req.cpu_request_milli, req.cpu_limit_milli)
        merged, shown, blamed = self._merge(state, req, n)
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
        if self.scope == "pod" and merged is None:
            affinity = self._pod_affinity(state, req.pod)
        try:
            new_state, alloc = self.policy.allocate(
                state, req.pod, req.container, req.cpu_request_milli, req.cpu_limit_milli, qos,
                init=req.init, restartable=req.restartable, numa_affinity=affinity)
        except AdmissionError as exc:
            return state, replace(self._rejected(state, req, hint, exc.reason, str(exc)), provider_hints=shown)
        mems = self.mems_of(alloc.cpus)
        if self.memory is not None and qos is QoS.GUARANTEED and req.memory:
            try:
                mstate = self.memory.allocate(memory_state(state.providers.get("memory")), req.pod, req.container,
                                              req.memory, hint)
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
        return new_state, Decision(req.pod, req.container, True, alloc.exclusive, alloc.cpus,
                                   mems, alloc.shared_pool, hint, provider_hints=shown)

    def remove(self, state: EngineState, pod: str, container: str) -> EngineState:
        state = self.policy.remove(state, pod, container)
        if self.memory is not None and "memory" in state.providers:
            mstate = memory_state(state.providers["memory"])
            if mstate.get(pod, container) is not None:
                state = state.with_provider("memory", self.memory.remove(mstate, pod, container))
        return state

    def _merge(self, state: EngineState, req: AdmissionRequest,
               n: int) -> tuple[MergeResult | None, dict[str, dict[str, str]], list[str]]:
        """Merged hint (None: topology manager off or pod already admitted), hints shown per
        provider, and the providers a rejection is on."""
        if self.manager.policy is Policy.NONE:
            return None, {}, []
        providers: list[HintProvider] = [
            CPUHintProvider(self.topology, lambda: self.policy.available_for_exclusive(state),
                            align_by_socket=self.policy.options.align_by_socket),
            StaticHintProvider(), *self.extra_providers]
        existing = state.get(req.pod, req.container)
        allocated = existing.current if existing is not None and existing.exclusive else None
        if self.scope == "pod":
            if state.pod_assignments(req.pod):
                return None, {}, []  # the pod was admitted as a whole with its first container
            total = n if req.pod_exclusive_cpus is None else req.pod_exclusive_cpus
            request = HintRequest(req.pod, None, exclusive_cpus=total, static_hints=req.hints)
        else:
            request = HintRequest(
                req.pod, req.container, exclusive_cpus=n, reusable_cpus=self.policy.reusable(state, req.pod),
                allocated_cpus=allocated, static_hints=req.hints)
            # Devices and memory align per container: NRI shows one container at a time.
            if self.devices and req.devices:
                providers.append(DeviceHintProvider(self.manager.numa_nodes, req.devices))
            if self.memory is not None and req.memory and QoS.parse(req.qos) is QoS.GUARANTEED:
                providers.append(MemoryHintProvider(self.memory, memory_state(state.providers.get("memory")),
                                                    req.pod, req.container, req.memory))
        answers = [p.hints(request) for p in providers]
        result = merge(self.manager, answers)
        names = [p.name for p in providers]
        shown = {name: summarize(a) for name, a in zip(names, answers, strict=True) if a}
        return result, shown, ([] if result.admit else blame(self.manager, names, answers))

    def _pod_affinity(self, state: EngineState, pod: str) -> int | None:
        for a in state.pod_assignments(pod):
            if a.numa_affinity is not None:
                return a.numa_affinity
        return None

    def _rejected(self, state: EngineState, req: AdmissionRequest, hint: TopologyHint | None,
                  reason: str, message: str) -> Decision:
        return Decision(req.pod, req.container, False, False, EMPTY, (), self.policy.shared_pool(state), hint,
                        reason, message)
