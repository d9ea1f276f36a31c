"""One admission, end to end: hints → topology merge → static policy → decision.

`Engine.admit(state, request)` is a pure function of its inputs (state in, new state and
decision out), so the service, `simulate`, the property tests and the benchmarks all run
exactly the same path. Rejections are data (`Decision.admitted = False`), not exceptions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from .cpumanager.options import StaticPolicyOptions
from .cpumanager.state import EngineState
from .cpumanager.static_policy import StaticPolicy, guaranteed_cpus, reserved_by_count
from .cpuset import EMPTY, CPUSet
from .errors import AdmissionError
from .qos import QoS
from .topology.model import Topology
from .topologymanager.cpu_hints import CPUHintProvider
from .topologymanager.hints import HintProvider, HintRequest, ResourceHints, StaticHintProvider, TopologyHint, nodes_of
from .topologymanager.merge import MergeResult, Policy, TopologyManager, merge_container, merge_pod


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


class Engine:
    def __init__(self, topology: Topology, policy: StaticPolicy, manager: TopologyManager,
                 scope: str = "container", providers: Sequence[HintProvider] = ()) -> None:
        if scope not in ("container", "pod"):
            raise ValueError(f"unknown topology manager scope {scope!r}")
        self.topology, self.policy, self.manager, self.scope = topology, policy, manager, scope
        self.extra_providers = tuple(providers)
        self._numa_masks = tuple((n, topology.numa_cpus[n].mask) for n in topology.numa_nodes)

    @classmethod
    def from_settings(cls, settings: Settings, topology: Topology) -> Engine:
        """Build from validated settings; `PolicyOptionError` names what the kubelet would refuse."""
        cm, tm = settings.cpu_manager, settings.topology_manager
        flags = {name.replace("-", "_"): True for name in cm.policy_options}
        options = StaticPolicyOptions(prefer_isolated_cpus=cm.isolated_cpus == "exclusive-first", **flags)
        reserved = cm.reserved_cpus if cm.reserved_cpus is not None else (
            reserved_by_count(topology, cm.reserved_cpu_count, options) if cm.reserved_cpu_count else EMPTY)
        policy = StaticPolicy(topology, reserved, options, topology_policy_name=tm.policy)
        manager = TopologyManager.from_topology(
            topology, tm.policy, prefer_closest_numa_nodes="prefer-closest-numa-nodes" in tm.policy_options)
        return cls(topology, policy, manager, tm.scope)

    # -- queries ---------------------------------------------------------------------------------
    def initial_state(self) -> EngineState:
        return self.policy.initial_state()

    def mems_of(self, cpus: CPUSet) -> tuple[int, ...]:
        """NUMA nodes holding any of `cpus`: one mask test per node, not one lookup per CPU (a shared
        pool of 250 CPUs is asked for on every shared container's admission)."""
        mask = cpus.mask
        return tuple(n for n, node_mask in self._numa_masks if mask & node_mask)

    # -- admission -------------------------------------------------------------------------------
    def admit(self, state: EngineState, req: AdmissionRequest) -> tuple[EngineState, Decision]:
        qos = QoS.parse(req.qos)
        n = guaranteed_cpus(qos, req.cpu_request_milli, req.cpu_limit_milli)
        merged = self._merge(state, req, n)
        if merged is not None and not merged.admit:
            error = merged.error
            return state, self._rejected(state, req, merged.hint, error.reason if error else "TopologyAffinityError",
                                         str(error) if error else "topology affinity error")
        hint = merged.hint if merged is not None else None
        affinity = hint.affinity if hint is not None else None
        if self.scope == "pod" and merged is None:
            affinity = self._pod_affinity(state, req.pod)
        try:
            new_state, alloc = self.policy.allocate(
                state, req.pod, req.container, req.cpu_request_milli, req.cpu_limit_milli, qos,
                init=req.init, restartable=req.restartable, numa_affinity=affinity)
        except AdmissionError as exc:
            return state, self._rejected(state, req, hint, exc.reason, str(exc))
        if alloc.exclusive and not alloc.already_assigned and not alloc.shared_pool and not self.policy.reserved:
            # The kubelet requires reserved CPUs for this reason: shared containers need somewhere to run.
            return state, self._rejected(
                state, req, hint, "InsufficientCPUs",
                f"taking {len(alloc.cpus)} exclusive CPUs would leave the shared pool empty; "
                "reserve CPUs (cpu_manager.reserved_cpus or reserved_cpu_count) for shared containers")
        return new_state, Decision(req.pod, req.container, True, alloc.exclusive, alloc.cpus,
                                   self.mems_of(alloc.cpus), alloc.shared_pool, hint)

    def remove(self, state: EngineState, pod: str, container: str) -> EngineState:
        return self.policy.remove(state, pod, container)

    def _merge(self, state: EngineState, req: AdmissionRequest, n: int) -> MergeResult | None:
        if self.manager.policy is Policy.NONE:
            return None
        providers: list[HintProvider] = [
            CPUHintProvider(self.topology, lambda: self.policy.available_for_exclusive(state),
                            align_by_socket=self.policy.options.align_by_socket),
            StaticHintProvider(), *self.extra_providers]
        existing = state.get(req.pod, req.container)
        allocated = existing.current if existing is not None and existing.exclusive else None
        if self.scope == "pod":
            if state.pod_assignments(req.pod):
                return None  # the pod was admitted as a whole with its first container
            total = n if req.pod_exclusive_cpus is None else req.pod_exclusive_cpus
            return merge_pod(self.manager, providers, HintRequest(
                req.pod, None, exclusive_cpus=total, static_hints=req.hints))
        return merge_container(self.manager, providers, HintRequest(
            req.pod, req.container, exclusive_cpus=n, reusable_cpus=self.policy.reusable(state, req.pod),
            allocated_cpus=allocated, static_hints=req.hints))

    def _pod_affinity(self, state: EngineState, pod: str) -> int | None:
        for a in state.pod_assignments(pod):
            if a.numa_affinity is not None:
                return a.numa_affinity
        return None

    def _rejected(self, state: EngineState, req: AdmissionRequest, hint: TopologyHint | None,
                  reason: str, message: str) -> Decision:
        return Decision(req.pod, req.container, False, False, EMPTY, (), self.policy.shared_pool(state), hint,
                        reason, message)
