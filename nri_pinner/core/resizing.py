"""NRI UpdateContainer in the core: a kubelet in-place resize applied through `Engine.resize` (README
"Resize"), and pod-level updates.

Rule (README "Our updates and the kubelet's"): cpus set, shares and quota unset = a cpuset-only
update (ours coming back, or someone else's: undone); shares or quota set = a kubelet resize.
The new request comes from the shares (the inverse of the kubelet's MilliCPUToShares), the
limit from quota/period, as for a create (`intent.py`).

No window (README "Resize: ordering"): when a resize gives the container CPUs it did not have
(grow, to-exclusive), the reply is parked until a cgroup pass has narrowed the shared containers
first and only then written the container's grown set; the reply then carries the grown set, which
runc update writes once more. Replying with the old set instead would race: runc update applies the
reply *after* the pass and would put the old set back. On a shrink the same pass writes the
container's smaller set before it widens the pool, so the reply does not wait. A refusal fails the
call: runc update is not run, the container keeps everything it had, and the kubelet retries.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from ..engine.admission_engine import AdmissionRequest
from ..engine.cpumanager.resize import ResizeDecision
from ..engine.cpumanager.static_policy import guaranteed_cpus
from ..engine.cpuset import CPUSet, CPUSetError
from ..nri.gen import api_pb2 as api
from ..nri.handlers import UpdatesReply
from . import pod_level
from .effects import Refusal, Timed
from .events import UpdateContainer, UpdatePodSandbox
from .intent import GUARANTEED, cpu_limit_milli, shares_to_milli
from .lifecycle import pending_updates, release_seeded
from .rebuild import note_unreadable, rebuild
from .reply_updates import UNLIMITED, cpu_update
from .state import ContainerRecord

if TYPE_CHECKING:
    from .context import CoreContext, Reply

log = structlog.get_logger("nri_pinner.service")


def is_resize(cpu: Any) -> bool:
    """Shares or quota set: the kubelet's update (ours and other cpuset-only writers set neither)."""
    return bool(cpu.shares.value or cpu.quota.value)


def requested(t: ContainerRecord, resources: api.LinuxResources) -> tuple[int, int]:
    """(request, limit) in millicores from an update's LinuxResources."""
    cpu = resources.cpu
    request = shares_to_milli(int(cpu.shares.value)) if cpu.HasField("shares") else t.intent.request_milli
    limit = cpu_limit_milli(cpu)
    if t.intent.qos == GUARANTEED and limit == 0:  # quota off (DisableCPUQuotaWithExclusiveCPUs): limit = request
        limit = request
    return request, limit


def adoptable(req: api.UpdateContainerRequest) -> bool:
    """What `rebuild` places: a container that is not stopped, of the pod the update names."""
    c = req.container
    return bool(c.id) and c.state != api.CONTAINER_STOPPED and bool(req.pod.id) and c.pod_sandbox_id == req.pod.id


def update_container(core: CoreContext, event: UpdateContainer) -> Reply:
    """Answer every update of a tracked container with its cpuset (after a resize: the new one).

    containerd merges a CRI update into its stored spec, which still holds the cpuset from the
    create (our cgroup writes never reach it), and hands all of it to runc: without our answer
    a kubelet resize would put a shared container back on CPUs that are exclusive now.
    """
    node, req = core.node, event.req
    cpu = req.linux_resources.cpu
    t = node.containers.get(req.container.id) or _adopt(core, event)
    if t is None:
        return _unknown(core, req)
    if t.stopped:
        return UpdatesReply(pending_updates(core))
    if not is_resize(cpu):
        desired = node.desired(t)[0]
        try:
            asked: CPUSet | None = CPUSet.parse(cpu.cpus) if cpu.cpus else None
        except CPUSetError:
            asked = None
        if asked != desired and not core.records.is_ours(t.container_id):
            log.warning("cpuset changed through CRI by someone else; restoring", container=t.key[1],
                        asked=cpu.cpus, desired=str(desired))
        return _reply(core, t, False)
    # the kubelet wrote the pod cgroup's quota before this update (doPodResizeAction): remove it again
    core.quotas.kubelet_resized(t.key[0])
    outcome = _resize(core, t, event)
    if isinstance(outcome, Refusal):
        return outcome  # runc update does not run: the container keeps its quota too
    if cpu.quota.value:  # the kubelet's new quota (limit x period): a reply leaves it unless exclusive
        t.cfs_quota, t.quota_removed = int(cpu.quota.value), False
    if outcome:
        return core.park_until_pass(outcome, lambda late: _reply(core, t, True), "UpdateContainer")
    return _reply(core, t, True)


def update_pod_sandbox(core: CoreContext, event: UpdatePodSandbox) -> Reply:
    """A pod-level resize (NRI >= v0.12 runtimes; older ones never subscribe us to it).

    The CPUs move in the containers' own UpdateContainer calls, which the kubelet sends after
    this one. In pod scope the pod's exclusive total is what the topology manager aligned, so
    a grow the node cannot give is reported here, before its container updates are refused.
    The reply has no fields to adjust; this call never fails. The kubelet has written the pod
    cgroup's quota: a pod with exclusive CPUs has it removed again (core/quotas.py).
    """
    node, req = core.node, event.req
    pod_key = req.pod.uid or req.pod.name
    limit = cpu_limit_milli(req.linux_resources.cpu)
    wanted = guaranteed_cpus(GUARANTEED, limit, limit) if core.settings.topology_manager.scope == "pod" else 0
    held = sum(len(a.current) for a in node.state.pod_assignments(pod_key) if a.exclusive)
    free = len(node.engine.policy.available_for_exclusive(node.state))
    fits = not wanted or wanted - held <= free
    core.quotas.kubelet_resized(pod_key)  # its pod cgroup's quota is the kubelet's again
    fields = {"pod": f"{req.pod.namespace}/{req.pod.name}", "cpu_limit_milli": limit,
              "pod_exclusive_cpus": held, "wanted": wanted or None, "free": free}
    if fits:
        log.info("pod resized", **fields)
    else:
        log.warning("pod resize cannot get its exclusive CPUs; its containers' updates will be refused", **fields)
    return None


def _adopt(core: CoreContext, event: UpdateContainer) -> ContainerRecord | None:
    """Track a running container this update names but Synchronize did not list (README "Resize":
    unknown containers): containerd 1.7 never synchronizes a pre-installed plugin, and a runtime
    that has not loaded every container yet leaves them out. It is placed by the rebuild rules
    (`rebuild` into the current state): its cgroup's cpuset trusted, a Guaranteed integer one
    keeps exclusive CPUs it runs on (or its checkpointed ones) when they are free, otherwise it
    is admitted again or waits on the shared pool. None when it cannot be placed."""
    node, req = core.node, event.req
    c = req.container
    if not adoptable(req):
        return None
    if any(o.key[1] == c.name for o in node.containers.in_pod(req.pod.uid or req.pod.name)):
        return None  # another instance holds its name (and engine record): the create replaces it
    release_seeded(core, c.id)  # the checkpoint's hold: `rebuild` gives these CPUs back from the entry
    entry = core.node.prior.get(c.id)
    cgroups = event.cgroups
    result = rebuild(node.engine, {c.id: entry} if entry is not None else {}, [req.pod], [c],
                     cgroups.get if cgroups else None, start=node.state,
                     gated=pod_level.gate_on_in_container_scope(core.settings))
    t = result.containers.get(c.id)
    if t is None:
        return None
    node.state = result.state
    node.containers[c.id] = t
    node.told.update(result.told)
    core.node.waiting.extend(result.waiting)
    note_unreadable(result, core.count)
    for message in result.repairs:
        log.warning("state repaired", repair=message)
    log.warning("container not known from Synchronize adopted on its update", pod=f"{req.pod.namespace}/"
                f"{req.pod.name}", container=c.name, container_id=c.id[:12], cpus=str(node.desired(t)[0]),
                exclusive=bool((a := node.state.get(*t.key)) and a.exclusive))
    core.commit()
    return t


def _unknown(core: CoreContext, req: api.UpdateContainerRequest) -> Reply:
    """A container that cannot be adopted: the shared pool for a running one, never no cpuset (with
    which runc would apply containerd's stale create-time set, possibly on exclusive CPUs)."""
    node, c = core.node, req.container
    updates = list(pending_updates(core))
    if c.id and c.state != api.CONTAINER_STOPPED:
        pool = node.shared_pool
        log.warning("update of an unknown container answered with the shared pool", container_id=c.id[:12],
                    container=c.name, cpus=str(pool))
        updates.insert(0, cpu_update(c.id, pool, node.mems_of(pool)))
    return UpdatesReply(tuple(updates))


def _reply(core: CoreContext, t: ContainerRecord, resized: bool) -> Reply:
    """The container's set (the runtime applies it with the update), plus pool changes for
    containers without a cgroup. After a resize a started container's told set is left to the
    passes, whose ordered pass writes it."""
    node = core.node
    # below a confirmed QoS slice a started container's own cgroup holds the wide set (the slice bounds
    # it): the reply names that, so runc's write and its systemd call agree with the passes' and nothing
    # is left to widen after runc has applied the reply (which a pass cannot know the moment of)
    held = t.started and core.slices.holds(t)
    desired, mems = core.slices.own(t) if held else node.desired(t)
    if held or not (resized and t.started and core.node.cgroup_writes):
        node.told[t.container_id] = (desired, mems)
    node.recorded[t.container_id] = (desired, mems)  # the runtime stores the set it applies
    # an exclusive container's update removes its quota again (the kubelet's request carries one); one
    # demoted from exclusive (pod_level.demote) carries the kubelet's back (containerd's record holds -1)
    mine = cpu_update(t.container_id, desired, mems, core.quotas.container_quota(t))
    t.quota_removed |= mine.cpu_quota == UNLIMITED
    return UpdatesReply((mine, *pending_updates(core, exclude=t.container_id)))


def _resize(core: CoreContext, t: ContainerRecord, event: UpdateContainer) -> int | Refusal:
    """Apply a kubelet resize; returns the generation the reply must wait for (0: none)."""
    node, req = core.node, event.req
    request, limit = requested(t, req.linux_resources)
    before = node.desired(t)[0]
    if t.intent.pod_level:  # the kubelet's managers skip such a pod at a resize too (pod_level.py)
        t.intent = replace(t.intent, limit_milli=limit)
        _note(core, t, "pod-level", "", before, before, request, limit,
              "its pod uses pod-level resources: resize keeps its CPUs (the shared pool, or under the "
              "PodLevelResourceManagers gate its own exclusive ones)", at=event.at)
        return 0
    if t.intent.source != "cgroup":  # the pod's annotation fixes the CPUs; the kubelet's values do not
        _note(core, t, "annotation", "", before, before, request, limit,
              "CPUs come from a nri-pinner.io annotation; resize keeps them", at=event.at)
        return 0
    state, d = node.engine.resize(node.state, *t.key, t.intent.qos, request, limit, like=_like(core, t, event))
    if not d.applied:
        _note(core, t, "refused", d.reason, before, before, request, limit, d.message, at=event.at)
        node.publish()  # status shows the refusal
        return Refusal(f"nri-pinner: resize of {t.key[1]!r} to {request}m/{limit}m refused: "
                       f"{d.reason}: {d.message}; the container keeps CPUs {before}", "resize")
    node.state = state
    t.intent = replace(t.intent, request_milli=request, limit_milli=limit)
    after = node.desired(t)[0]
    _note(core, t, d.kind, "", before, after, request, limit, "", d, at=event.at)
    core.commit()  # a pass follows: narrowing writes first, then widening (passes.py)
    if not t.started:
        t.start_after = node.generation  # its start waits for a pass that saw the new CPUs
    if d.added and t.started and core.node.cgroup_writes:
        return node.generation
    return 0


def _like(core: CoreContext, t: ContainerRecord, event: UpdateContainer) -> AdmissionRequest | None:
    """What a create of this container is asked beyond its CPUs (its devices; the NIC provider
    reads the pod's NICs itself), for the fresh admission of fractional -> integer; None for a
    container that is exclusive already (a grow stays inside its admitted affinity). Its memory
    is the blocks it holds (`Engine.resize`), not the update's limits: a resize never allocates
    memory. No pod total: the update's pod record has the create-time pod resources (stale)."""
    a = core.node.state.get(*t.key)
    if a is None or a.exclusive:
        return None
    extras = event.extras.copy()
    extras.pop("memory", None)
    return AdmissionRequest(*t.key, t.intent.qos, init=t.intent.init, restartable=t.intent.restartable, **extras)


def _note(core: CoreContext, t: ContainerRecord, outcome: str, reason: str, before: CPUSet, after: CPUSet, request: int,
          limit: int, message: str, d: ResizeDecision | None = None, at: float | None = None) -> None:
    """Log, count and remember (for status) one resize. ``at``: the wall time the edge received the
    update (`UpdateContainer.at`; None, from an event the edge did not stamp: status shows no "at").
    An applied resize is logged by the edge, which times the decision (`Timed`: ``decision_ms``)."""
    entry: dict[str, Any] = {"outcome": outcome, "before": str(before), "after": str(after),
                             "request_milli": request, "limit_milli": limit,
                             **({"at": at} if at is not None else {})}
    if d is not None:
        entry.update(kept=str(d.kept), added=str(d.added), released=str(d.released))
    if reason:
        entry.update(reason=reason, message=message)
    t.last_resize = entry
    core.count("resizes", outcome, reason)
    who = {"pod": f"{t.intent.namespace}/{t.intent.pod_name}", "container": t.key[1]}
    if outcome == "refused":
        log.info("resize refused", **who, reason=reason, message=message, before=str(before),
                 request_milli=request, limit_milli=limit)
    elif d is None:
        log.info("container resized", **who, kind=outcome, before=str(before), after=str(after),
                 request_milli=request, limit_milli=limit, **({"note": message} if message else {}))
    else:  # logged by the edge once it has timed the update: decision_ms (the core reads no clock)
        core.emit(Timed(message="container resized", fields={
            **who, "kind": outcome, "before": str(before), "after": str(after), "request_milli": request,
            "limit_milli": limit, **({"note": message} if message else {}), "kept": str(d.kept),
            "added": str(d.added), "released": str(d.released)}))
