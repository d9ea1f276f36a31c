"""Rebuild the engine state from the runtime's containers on every (re)connect.

The runtime is the truth about which containers exist; the checkpoint (or the state from the
previous connection) is a hint about which exclusive CPUs each one had. Every disagreement is
repaired and reported, never a reason to refuse to start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..engine.admission import AdmissionRequest, Engine
from ..engine.cpumanager.state import Assignment, EngineState
from ..engine.cpumanager.static_policy import guaranteed_cpus
from ..engine.cpuset import EMPTY, CPUSet, CPUSetError
from ..engine.qos import QoS
from ..nri.gen import api_pb2 as api
from .intent import GUARANTEED, UNMANAGED, ContainerIntent, IntentError, intent_from_nri
from .tracker import Tracked

PriorEntries = Mapping[str, Mapping[str, Any]]  # container id -> checkpoint entry
CgroupReader = Callable[[str], tuple[CPUSet, str] | None]  # cgroups path -> (cpus, mems), None = unreadable


@dataclass
class Rebuilt:
    state: EngineState
    containers: dict[str, Tracked]
    repairs: list[str]


def checkpoint_entries(body: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    if not body:
        return {}
    entries = body.get("entries")
    if not isinstance(entries, list):
        return {}
    return {str(e["container_id"]): e for e in entries if isinstance(e, Mapping) and "container_id" in e}


def _cpus(text: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except CPUSetError:
        return EMPTY


def _intent(pod: api.PodSandbox, c: api.Container, repairs: list[str]) -> ContainerIntent:
    try:
        return intent_from_nri(pod, c)
    except IntentError as exc:
        who = f"{pod.namespace}/{pod.name}/{c.name}"
        repairs.append(f"{who} ({c.id[:12]}): {exc}; running it on the shared pool")
        return replace(intent_from_nri(pod, api.Container(id=c.id, name=c.name)), qos=UNMANAGED)


def rebuild(engine: Engine, prior: PriorEntries, pods: Sequence[api.PodSandbox],
            containers: Sequence[api.Container], cgroup: CgroupReader | None = None) -> Rebuilt:
    pods_by_id = {p.id: p for p in pods}
    active = [c for c in containers
              if c.state != api.CONTAINER_STOPPED and c.pod_sandbox_id in pods_by_id]
    state = engine.initial_state()
    tracked: dict[str, Tracked] = {}
    repairs: list[str] = []
    # Containers the previous state knew go first, so they keep their CPUs.
    for c in sorted(active, key=lambda c: (c.id not in prior, c.id)):
        pod = pods_by_id[c.pod_sandbox_id]
        intent = _intent(pod, c, repairs)
        n = guaranteed_cpus(QoS.GUARANTEED, intent.request_milli, intent.limit_milli) if intent.qos == GUARANTEED else 0
        actual, mems = _current_cpuset(c, cgroup)
        entry = prior.get(c.id)
        if entry is not None and entry.get("restartable") and intent.init:
            intent = replace(intent, restartable=True)  # found running as a sidecar before the restart
        who = f"{pod.namespace}/{pod.name}/{c.name}"
        state = _place(engine, state, intent, n, actual, entry, who, repairs)
        tracked[c.id] = Tracked(c.id, c.pod_sandbox_id, intent, c.linux.cgroups_path,
                                started=c.state == api.CONTAINER_RUNNING,
                                applied_cpus=actual or None, applied_mems=mems)
    for cid in prior:
        if cid not in tracked:
            repairs.append(f"dropped checkpoint entry for container {cid[:12]}: the runtime no longer runs it")
    state, messages = engine.policy.start(state)
    repairs.extend(messages)
    return Rebuilt(state, tracked, repairs)


def _current_cpuset(c: api.Container, cgroup: CgroupReader | None) -> tuple[CPUSet, str]:
    """Stale-cpuset rule (issue 19): a running container's cgroup holds its real cpuset.

    Pool changes are written into cgroups directly, so containerd's record (what Synchronize
    reports) still holds the cpuset of the container's create. The cgroup wins when it can be
    read; the runtime's record only for containers without one (created, not started yet: their
    record is current, our fallback updates reach it).
    """
    held = cgroup(c.linux.cgroups_path) if cgroup is not None and c.linux.cgroups_path else None
    if held is not None:
        return held
    return _cpus(c.linux.resources.cpu.cpus), c.linux.resources.cpu.mems


def _place(engine: Engine, state: EngineState, intent: ContainerIntent, n: int, actual: CPUSet,
           entry: Mapping[str, Any] | None, who: str, repairs: list[str]) -> EngineState:
    available = engine.policy.available_for_exclusive(state)
    if n:
        if entry is not None and entry.get("exclusive"):
            current = _cpus(str(entry.get("current", "")))
            if len(current) == n and current.issubset(available):
                admitted = _cpus(str(entry.get("admitted", ""))) or current
                return _insert(state, intent, admitted, current, entry.get("numa_affinity"))
            repairs.append(f"{who}: checkpointed CPUs {current} are no longer available")
        if len(actual) == n and actual.issubset(available):
            if entry is None:
                repairs.append(f"{who}: adopted exclusive CPUs {actual} from the runtime (not in the checkpoint)")
            return _insert(state, intent, actual, actual, None)
    request = AdmissionRequest(intent.pod_key, intent.container, intent.qos, intent.request_milli,
                               intent.limit_milli, init=intent.init, restartable=intent.restartable)
    new_state, decision = engine.admit(state, request)
    if decision.admitted:
        if n:
            repairs.append(f"{who}: re-admitted on exclusive CPUs {decision.cpus} (was {actual or 'unpinned'})")
        return new_state
    repairs.append(f"{who}: cannot be re-pinned ({decision.reason}: {decision.message}); it stays on the shared pool")
    new_state, _ = engine.admit(state, replace(request, qos=QoS.BEST_EFFORT))
    return new_state


def _insert(state: EngineState, intent: ContainerIntent, admitted: CPUSet, current: CPUSet,
            affinity: Any) -> EngineState:
    a = Assignment(intent.pod_key, intent.container, admitted, current, exclusive=True, init=intent.init,
                   restartable=intent.restartable,
                   numa_affinity=affinity if isinstance(affinity, int) and affinity > 0 else None)
    return state.hold(a)
