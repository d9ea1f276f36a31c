"""Rebuild the engine state from the runtime's containers on every (re)connect.

The runtime is the truth about which containers exist; the checkpoint (or the state from the
previous connection) is a hint about which exclusive CPUs each one had. Every disagreement is
repaired and reported, never a reason to refuse to start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import structlog

from ..engine.admission_engine import AdmissionRequest, Engine
from ..engine.cpumanager.state import Assignment, EngineState, PodBlock
from ..engine.cpumanager.static_policy import guaranteed_cpus
from ..engine.cpuset import EMPTY, CPUSet, CPUSetError
from ..engine.pod_level_admission import place
from ..engine.qos import QoS
from ..nri.gen import api_pb2 as api
from . import pod_level
from .checkpoint import restore_memory
from .intent import GUARANTEED, UNMANAGED, ContainerIntent, intent_from_nri, qos_from_cgroup_parent
from .state import ContainerRecord, Mems, NodeState, Told

if TYPE_CHECKING:
    from .effects import CounterName

log = structlog.get_logger("nri_pinner.service")

PriorEntries = Mapping[str, Mapping[str, Any]]  # container id -> checkpoint entry
CgroupReader = Callable[[str], Told | None]  # cgroups path -> (cpus, mems), None = unreadable


@dataclass(frozen=True)
class Unreadable:
    """A container whose data could not be read: it runs on the shared pool until it is recreated."""

    who: str
    container_id: str
    error: str
    source: str  # "annotation" | "container"


@dataclass
class Rebuilt:
    state: EngineState
    containers: dict[str, ContainerRecord]
    repairs: list[str]
    unreadable: list[Unreadable] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # Guaranteed ids left on the shared pool, oldest first
    told: dict[str, Told] = field(default_factory=dict)  # the cpusets the containers hold now
    recorded: dict[str, Told] = field(default_factory=dict)  # the runtime's own record of them


def _cpus(text: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except CPUSetError:
        return EMPTY


def _mems(text: str) -> Mems:
    """The runtime's cpuset.mems text as node ids (unreadable: unknown, resent)."""
    return tuple(_cpus(text))


def _shared_intent(pod: api.PodSandbox, c: api.Container) -> ContainerIntent:
    """The intent of a container whose data cannot be read, built without reading any of it again."""
    return ContainerIntent(pod_uid=pod.uid, pod_name=pod.name, namespace=pod.namespace, container=c.name,
                           container_id=c.id, qos=UNMANAGED, request_milli=0, limit_milli=0, source="unreadable",
                           kubelet=qos_from_cgroup_parent(pod.linux.cgroup_parent) != UNMANAGED)


def _kept_stopped(c: api.Container, pods: Mapping[str, api.PodSandbox], prior: PriorEntries) -> bool:
    """An exited container of a kubelet pod whose CPUs (or memory) the previous state kept for its pod
    (plugin.py: kept until the pod goes); without a checkpoint entry nothing says its sandbox is live."""
    entry = prior.get(c.id)
    pod = pods.get(c.pod_sandbox_id)
    return (entry is not None and pod is not None and (bool(entry.get("exclusive")) or bool(entry.get("memory_blocks")))
            and qos_from_cgroup_parent(pod.linux.cgroup_parent) != UNMANAGED)


def _with_role(intent: ContainerIntent, entry: Mapping[str, Any] | None) -> ContainerIntent:
    """The role the previous state had decided (at a stop, from PodResources, ...) when the
    container's own data does not say."""
    if entry is None or intent.role or not entry.get("role"):
        return intent
    return replace(intent, init=bool(entry.get("init")), restartable=bool(entry.get("restartable")),
                   role=str(entry["role"])[:32])


def _intent(pod: api.PodSandbox, c: api.Container, unreadable: list[Unreadable]) -> ContainerIntent:
    try:
        return intent_from_nri(pod, c)
    except Exception as exc:  # Synchronize never fails because of one container's data
        who = f"{pod.namespace}/{pod.name}/{c.name}"
        unreadable.append(Unreadable(who, c.id, str(exc), "annotation" if "annotation" in str(exc) else "container"))
        return _shared_intent(pod, c)


def note_unreadable(result: Rebuilt, count: Callable[[CounterName, str], None]) -> None:
    """Log and count what Synchronize could not read (the node was synchronized without it)."""
    for u in result.unreadable:
        pod, _, name = u.who.rpartition("/")
        log.warning("container data unreadable: running it on the shared pool", pod=pod, container=name,
                    container_id=u.container_id[:12], error=u.error)
        count("bad_input", u.source)


def rebuild(engine: Engine, prior: PriorEntries, pods: Sequence[api.PodSandbox],
            containers: Sequence[api.Container], cgroup: CgroupReader | None = None,
            start: EngineState | None = None, gated: bool = False, pod_scope: bool = False) -> Rebuilt:
    """``start``: place the containers into this state instead of an empty one (adopting a container
    an event names that Synchronize did not list, `core/resizing.py`); ``gated``:
    pod_level.gate_on_in_container_scope; ``pod_scope``: pod_scope_blocks.gate_on_in_pod_scope (the
    checkpoint's pod blocks are restored, pod_blocks.py)."""
    pods_by_id = {p.id: p for p in pods}
    active = [c for c in containers if c.pod_sandbox_id in pods_by_id
              and (c.state != api.CONTAINER_STOPPED or _kept_stopped(c, pods_by_id, prior))]
    state = engine.initial_state() if start is None else start
    out = Rebuilt(state, {}, [])
    tracked, repairs = out.containers, out.repairs
    # Shared containers' records when no hint merge is involved (`Engine.merges_shared`): admitting
    # one is adding its record and changes nothing any other admission looks at but its own key, so
    # they are collected and added in one copy (a per-container admission copies the whole state).
    bulk = not engine.merges_shared
    shared: dict[tuple[str, str], Assignment] = {}
    # Containers the previous state knew go first, so they keep their CPUs; exited ones last (a running
    # container of the same name replaced them; their CPUs may be reused by their pod's running ones).
    order = sorted(active, key=lambda c: (c.state == api.CONTAINER_STOPPED, c.id not in prior, c.id))
    intents = {c.id: _intent(pods_by_id[c.pod_sandbox_id], c, out.unreadable) for c in order}
    if pod_scope:
        state = restore_blocks(engine, state, prior, {c.id: intents[c.id].pod_key for c in order}, repairs)
    # pods with pod-level resources, seen from all their containers at once (pod_level.py)
    pod_levels = pod_level.of_listing(pods_by_id, {
        c.id: (c.pod_sandbox_id, intents[c.id], c.state == api.CONTAINER_STOPPED) for c in order})
    for c in order:
        pod = pods_by_id[c.pod_sandbox_id]
        intent = intents[c.id]
        if c.pod_sandbox_id in pod_levels and intent.kubelet and intent.qos == GUARANTEED:
            intent = pod_level.as_pod_level(intent, pod_levels[c.pod_sandbox_id], gated)
        in_block = intent.pod_key in state.pod_blocks and intent.kubelet
        if in_block:  # its part of its pod's restored block, whatever its cgroup holds now (repaired)
            intent = pod_level.as_pod_level(intent, intent.pod_level or "pod-block")
        actual, mems = CPUSet(), _mems(c.linux.resources.cpu.mems)
        stopped = c.state == api.CONTAINER_STOPPED
        try:
            entry = prior.get(c.id)
            intent = _with_role(intent, entry)
            if stopped:  # its cgroup is gone: the checkpoint's CPUs, never a new allocation
                actual, mems = _cpus(str(entry.get("current", ""))) if entry else EMPTY, ()
            else:
                actual, mems = _current_cpuset(c, cgroup)
            guaranteed = intent.qos == GUARANTEED
            n = guaranteed_cpus(QoS.GUARANTEED, intent.request_milli, intent.limit_milli) if guaranteed else 0
            if entry is not None and entry.get("restartable") and intent.init:
                intent = replace(intent, restartable=True)  # found running as a sidecar before the restart
            key = intent_key(intent)
            if entry is not None and entry.get("memory_blocks") and not (intent.pod_level and not intent.request_milli):
                state = restore_memory(engine, state, key, entry, repairs)
            if in_block:
                if key in shared:
                    state, shared = state.with_shared(shared), {}
                placed = state if state.get(*key) is not None else place(
                    engine, state, key[0], key[1], init=intent.init, restartable=intent.restartable)[0]
            elif stopped:
                if key in shared:
                    state, shared = state.with_shared(shared), {}
                placed = _place_stopped(engine, state, intent, n, actual, entry,
                                        f"{pod.namespace}/{pod.name}/{c.name}", repairs)
            elif bulk and n == 0:
                if key not in shared and state.get(*key) is None:  # else: already admitted, as `admit` says
                    shared[key] = Assignment(*key, EMPTY, EMPTY, exclusive=False, init=intent.init,
                                             restartable=intent.restartable)
                placed = state
            else:
                if key in shared:  # a second container under a shared one's name sees it, as in order
                    state, shared = state.with_shared(shared), {}
                placed = _place(engine, state, intent, n, actual, entry, f"{pod.namespace}/{pod.name}/{c.name}",
                                repairs)
                if n and not _exclusive(placed, intent):
                    out.waiting.append(c.id)
        except Exception as exc:  # one container's data never fails the whole Synchronize
            out.unreadable.append(Unreadable(f"{pod.namespace}/{pod.name}/{c.name}", c.id,
                                             f"cannot place it: {exc!r}", "container"))
            intent = _shared_intent(pod, c)
            state, shared = state.with_shared(shared), {}
            placed, _ = engine.admit(state, AdmissionRequest(intent.pod_key, intent.container, QoS.BEST_EFFORT))
        state = placed
        tracked[c.id] = ContainerRecord(c.id, c.pod_sandbox_id, intent, c.linux.cgroups_path,
                                started=c.state == api.CONTAINER_RUNNING, stopped=stopped, exit_code=c.exit_code,
                                cfs_quota=int(c.linux.resources.cpu.quota.value))
        if actual:
            out.told[c.id] = (actual, mems)
        if c.linux.resources.cpu.cpus:
            out.recorded[c.id] = (_cpus(c.linux.resources.cpu.cpus), _mems(c.linux.resources.cpu.mems))
    state = state.with_shared(shared).with_reusable_recomputed()  # reusable init CPUs are not checkpointed
    created = {c.id: (c.created_at or 0) for c in active}  # v0.10+ runtimes only; else the order above
    out.waiting.sort(key=lambda cid: created[cid])
    for cid in prior:
        if cid not in tracked:
            repairs.append(f"dropped checkpoint entry for container {cid[:12]}: the runtime no longer runs it")
    providers, blocks = state.providers, state.pod_blocks  # the CPU policy's repair pass knows neither:
    for block in blocks.values():  # it sees the pod pools as shared, as it recomputes them
        state = state.with_changes(default_set=state.default_set | (block.block - state.exclusive_cpus()))
    state, messages = engine.policy.start(state)
    for pod_key, block in blocks.items():
        if state.pod_assignments(pod_key):  # (a block none of whose containers is left goes back)
            state = state.with_pod_block(pod_key, block, state.default_set - block.block)
    out.state = replace(state, providers=providers)
    repairs.extend(messages)
    return out


def restore_blocks(engine: Engine, state: EngineState, prior: PriorEntries, pods: Mapping[str, str],
                   repairs: list[str]) -> EngineState:
    """The pod blocks the checkpoint names (``pods``: container id -> pod key), each held again before
    any container is placed, while its CPUs are free; one that is not usable is dropped and reported:
    its pod's containers then run on the shared pool, as a pod-level pod without a block."""
    for cid, pod in sorted(pods.items()):
        entry = prior.get(cid)
        if entry is None or "pod_block" not in entry or pod in state.pod_blocks:
            continue
        try:
            block = PodBlock.from_dict(entry["pod_block"])
        except (ValueError, TypeError, KeyError, CPUSetError) as exc:
            repairs.append(f"pod {pod}: checkpointed CPU block unusable ({exc}); its containers use the shared pool")
            continue
        if not block.block or not block.block.issubset(engine.policy.available_for_exclusive(state)):
            repairs.append(f"pod {pod}: checkpointed CPU block {block.block} no longer available; its containers "
                           "use the shared pool")
            continue
        state = state.with_pod_block(pod, block, state.default_set - block.block)
    return state


def _place_stopped(engine: Engine, state: EngineState, intent: ContainerIntent, n: int, held: CPUSet,
                   entry: Mapping[str, Any] | None, who: str, repairs: list[str]) -> EngineState:
    """An exited container keeps the CPUs it had, if nothing else took them (a regular init container's
    may overlap its pod's containers: they reused them)."""
    key = intent_key(intent)
    if state.get(*key) is not None:  # a running container of the same name was placed first: it wins
        return state
    if n and entry is not None and entry.get("exclusive") and len(held) == n:
        allowed = engine.policy.available_for_exclusive(state)
        if intent.init and not intent.restartable:
            for a in state.pod_assignments(intent.pod_key):
                if a.exclusive:
                    allowed = allowed | a.current
        if held.issubset(allowed):
            admitted = _cpus(str(entry.get("admitted", ""))) or held
            return _insert(state, intent, admitted, held, entry.get("numa_affinity"))
        repairs.append(f"{who}: exited, kept CPUs {held} for its pod, but they are no longer available; released")
        return state
    return state.with_changes(put=Assignment(*key, EMPTY, EMPTY, exclusive=False, init=intent.init,
                                             restartable=intent.restartable))


def _exclusive(state: EngineState, intent: ContainerIntent) -> bool:
    held = state.get(intent.pod_key, intent.container)
    return held is not None and held.exclusive


def intent_key(intent: ContainerIntent) -> tuple[str, str]:
    return (intent.pod_key, intent.container)


def _current_cpuset(c: api.Container, cgroup: CgroupReader | None) -> Told:
    """Stale-cpuset rule (issue 19): a running container's cgroup holds its real cpuset.

    Pool changes are written into cgroups directly, so containerd's record (what Synchronize
    reports) still holds the cpuset of the container's create. The cgroup wins when it can be
    read; the runtime's record only for containers without one (created, not started yet: their
    record is current, our fallback updates reach it).
    """
    held = cgroup(c.linux.cgroups_path) if cgroup is not None and c.linux.cgroups_path else None
    if held is not None:
        return held
    return _cpus(c.linux.resources.cpu.cpus), _mems(c.linux.resources.cpu.mems)


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


def repin_waiting(node: NodeState, waiting: list[str]) -> list[str]:
    """Guaranteed containers the rebuild left on the shared pool get exclusive CPUs, oldest first, as
    soon as some are free (before a newer container can take them). The new cpusets reach the runtime
    like a drift repair: in the next reply's updates or from the reconcile timer."""
    messages: list[str] = []
    engine = node.engine
    for cid in list(waiting):
        t = node.containers.get(cid)
        if t is None or t.stopped or t.intent.qos is not QoS.GUARANTEED or _exclusive(node.state, t.intent):
            waiting.remove(cid)
            continue
        i = t.intent
        request = AdmissionRequest(i.pod_key, i.container, i.qos, i.request_milli, i.limit_milli, init=i.init,
                                   restartable=i.restartable)
        state, decision = engine.admit(engine.remove(node.state, *t.key), request)
        if decision.admitted and decision.exclusive:
            node.state = state
            waiting.remove(cid)
            messages.append(f"{i.namespace}/{i.pod_name}/{i.container}: pinned on exclusive CPUs {decision.cpus} "
                            "after waiting on the shared pool")
    return messages
