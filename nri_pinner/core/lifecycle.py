"""Container and pod lifecycle in the core: every container gets its cpuset before it starts; an
exclusive container starts only once no started container's cgroup holds its CPUs (its StartContainer
reply is parked until a pass has written them); exited containers of kubelet pods keep their CPUs for
their pod, as the kubelet does (roles.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from ..engine.admission_engine import AdmissionRequest
from ..engine.cpumanager.static_policy import guaranteed_cpus
from ..engine.qos import QoS
from ..nri.gen import api_pb2 as api
from ..nri.handlers import CpusetUpdate, CreateReply, UpdatesReply
from . import pod_level, pod_scope_blocks
from .effects import Refusal, Timed
from .events import CreateContainer, RemoveContainer, RemovePodSandbox, StartContainer, StopContainer, StopPodSandbox
from .intent import GUARANTEED, IntentError, cpu_limit_milli, intent_from_nri
from .rebuild import repin_waiting
from .reply_updates import UNLIMITED, reply_updates
from .roles import decide_role, mark_sidecars, release_pod, role_at_create
from .state import ContainerRecord, mems_text

if TYPE_CHECKING:
    from ..engine.decision import Decision
    from .context import CoreContext, Reply

log = structlog.get_logger("nri_pinner.service")


def pending_updates(core: CoreContext, exclude: str = "") -> tuple[CpusetUpdate, ...]:
    updates = tuple(reply_updates(core.node, core.node.cgroup_writes, exclude))
    if updates:
        core.passes.replied_with({u.container_id for u in updates})
    return updates


def create(core: CoreContext, event: CreateContainer) -> Reply:
    req, node = event.req, core.node
    try:
        intent = intent_from_nri(req.pod, req.container)
    except IntentError as exc:
        core.count("rejected", "BadAnnotation")
        core.count("bad_input", "annotation")
        log.info("create refused: bad annotation", pod=f"{req.pod.namespace}/{req.pod.name}",
                 container=req.container.name, error=str(exc))
        return Refusal(f"nri-pinner: {exc}")
    if intent.note:
        core.count("bad_input", "noderesource")
        log.warning("noderesource.dev/resources not used", pod=f"{req.pod.namespace}/{req.pod.name}",
                    container=intent.container, error=intent.note)
    intent = role_at_create(node, intent)
    # spec.resources: the kubelet's managers skip the pod (gated: all but its Guaranteed-equivalent containers)
    intent = pod_level.settle(node, intent, req.pod, pod_level.gate_on_in_container_scope(core.settings))
    in_block = pod_scope_blocks.admission(node, core.settings, intent, req.pod)  # pod scope, gated
    if in_block is not None:  # in its pod's block: never admitted on its own (request read as 0)
        intent = pod_level.as_pod_level(intent, intent.pod_level or "noderesource")
    if intent.pod_level and not pod_level.keeps_exclusive(node, intent) and not pod_scope_blocks.slices(in_block):
        core.quotas.pod_level(intent.pod_key, req.pod)  # its pod cgroup gets the kubelet's quota back (quotas.py)
    mark_sidecars(node, intent.pod_key, intent.init)
    extras = event.extras.copy()
    if intent.qos != GUARANTEED or (intent.pod_level and not intent.request_milli):
        extras.pop("memory", None)
    request = AdmissionRequest(intent.pod_key, intent.container, intent.qos, intent.request_milli,
                               intent.limit_milli, init=intent.init, restartable=intent.restartable,
                               pod_exclusive_cpus=None if intent.pod_level else _pod_cpus(core, req.pod), **extras)
    state, decision = in_block if in_block is not None else node.engine.admit(node.state, request)
    _count_providers(core, decision)
    core.count("pinning_requests")
    core.emit(Timed("allocation_seconds"))  # the edge times the create (the core reads no clock)
    outcome = "admitted"
    if not decision.admitted:
        core.count("rejected", decision.reason)
        core.record(decision, intent, "rejected")
        log.info("admission rejected", pod=f"{intent.namespace}/{intent.pod_name}",
                 container=intent.container, reason=decision.reason, message=decision.message)
        if core.settings.nri.on_reject == "fail":
            node.publish()  # the decision log shows the rejection
            return Refusal(f"nri-pinner: {decision.reason}: {decision.message}")
        core.count("fail_open", "rejected")
        state, decision = node.engine.admit(node.state, replace(request, qos=QoS.BEST_EFFORT))
        outcome = "fail-open"
    node.state = state
    for old in node.containers.with_key((intent.pod_key, intent.container)):
        node.drop(old.container_id)  # a restarted container replaces the old record
    t = ContainerRecord(intent.container_id, req.container.pod_sandbox_id, intent, req.container.linux.cgroups_path,
                cfs_quota=int(req.container.linux.resources.cpu.quota.value))
    node.containers[t.container_id] = t
    cpus, mems = node.desired(t)
    # below a confirmed QoS slice runc creates the cgroup (and tells systemd) with the wide set the slice
    # bounds: its start then needs no systemd call of ours to widen it (core/qos_slices.py)
    own = core.slices.own(t)  # (cpus, mems) unless below a confirmed slice
    node.told[t.container_id] = node.recorded[t.container_id] = own
    updates = pending_updates(core, exclude=t.container_id)
    core.record(decision, intent, outcome)
    core.commit()
    t.start_after = node.generation
    quota = core.quotas.container_quota(t)  # exclusive: no CFS quota (core/quotas.py)
    t.quota_removed = quota == UNLIMITED
    log.info("container pinned" if decision.exclusive else "container on shared pool",
             pod=f"{intent.namespace}/{intent.pod_name}", container=intent.container, qos=intent.qos,
             cpus=str(cpus), mems=mems_text(mems), exclusive=decision.exclusive, outcome=outcome,
             shared_updates=len(updates), reason=intent.source,
             **({"cgroup_cpus": str(own[0])} if own[0] != cpus else {}),
             **({"cfs_quota": f"{t.cfs_quota} -> unlimited"} if t.quota_removed else {}))
    return CreateReply(str(own[0]), mems_text(own[1]), updates, quota)


def _count_providers(core: CoreContext, decision: Decision) -> None:
    """Per hint provider: the admissions it took part in, or the rejections it could not be satisfied in."""
    if decision.admitted:
        for provider in decision.provider_hints:
            core.count("provider_admissions", provider)
    else:
        for name in sorted({b.split("[")[0] for b in decision.blamed}):
            core.count("provider_rejections", name)


def start(core: CoreContext, event: StartContainer) -> Reply:
    """An exclusive container starts only once no started container's cgroup holds its CPUs."""
    node = core.node
    t = node.containers.get(event.container_id)
    if t is None:
        return None
    t.started = True
    a = node.assignment(t)
    exclusive = a is not None and a.exclusive
    desired, own = node.desired(t), core.slices.own(t)
    told = node.told.get(t.container_id)
    if core.node.cgroup_writes and told != desired and own == desired:
        core.passes.want(node.generation)  # its own cgroup lags (the pool changed since its create)
    elif core.node.cgroup_writes and (told != own or core.slices.lags(t)):
        core.passes.lagging()  # below a QoS slice: its cgroup gets the wide set (core/qos_slices.py)
    if not core.node.cgroup_writes or not exclusive:
        return None
    # A pass begun after this container got its CPUs narrowed every started neighbour; later
    # changes (a Burstable create beside it) never hand those CPUs back: no newer pass needed.
    return core.park_until_pass(t.start_after or node.generation, lambda late: None, "StartContainer")


def stop(core: CoreContext, event: StopContainer) -> Reply:
    node = core.node
    t = node.containers.get(event.container_id)
    if t is None:
        if _release_seeded(core, event.container_id):
            core.commit()
        return UpdatesReply(pending_updates(core))
    t.stopped = True
    t.exit_code = event.exit_code
    a = node.assignment(t)
    if t.intent.kubelet:
        # kubelet pod: its CPUs (and memory) stay with the pod (module doc); only whether they
        # are reusable by the pod's next container depends on what it was
        if a is not None and not t.intent.role and (listing := decide_role(node, t, final=False)) is not None:
            core.emit(listing)  # the List lacks the pod: a new one, read at the pod's next create
        updates = pending_updates(core)
        core.commit()
        a = node.assignment(t)
        log.info("container stopped", container=t.key[1], pod=t.intent.pod_name, released=False,
                 kept_for_pod=str(a.current) if a is not None and a.exclusive else "",
                 role=("init" if t.intent.init else "app") if t.intent.role else "undecided",
                 decided_by=t.intent.role or None, shared=str(node.shared_pool))
        return UpdatesReply(updates)
    # An exited init container's exclusive CPUs and memory blocks stay for its app containers
    # (kubelet reuse; memory even when its CPUs were shared): released at removal.
    keep = a is not None and a.init and not a.restartable and (
        a.exclusive or bool(node.engine.memory_mems(node.state, *t.key)))
    if not keep:
        node.state = node.engine.remove(node.state, *t.key)
        repin(core)
    updates = pending_updates(core)
    core.commit()
    log.info("container stopped", container=t.key[1], pod=t.intent.pod_name,
             released=not keep and a is not None and a.exclusive, shared=str(node.shared_pool))
    return UpdatesReply(updates)


def remove(core: CoreContext, event: RemoveContainer) -> Reply:
    node = core.node
    t = node.drop(event.container_id) if event.container_id in node.containers else None
    if t is None and _release_seeded(core, event.container_id):
        core.commit()
    if t is not None and node.by_key(t.key) is None:
        node.state = node.engine.remove(node.state, *t.key)
        repin(core)
        core.commit()
    return None


def stop_pod(core: CoreContext, event: StopPodSandbox) -> Reply:
    """The pod is going (or its sandbox is being recreated): no container of this sandbox runs
    again, so every CPU its containers kept goes back (kubelet: removeStaleState once the pod is
    inactive; see roles.py)."""
    node, pod = core.node, event.pod
    core.node.stopped_sandboxes.add(pod.id)
    pod_key = pod.uid or pod.name
    for t in node.containers.in_pod(pod_key):
        if t.sandbox_id == pod.id:
            t.stopped = True
    released = release_pod(node, pod_key, pod.id, core.node.stopped_sandboxes)
    if released:
        repin(core)
    core.commit()
    log.info("pod stopped", pod=f"{pod.namespace}/{pod.name}", released=str(released), shared=str(node.shared_pool))
    return None


def remove_pod(core: CoreContext, event: RemovePodSandbox) -> Reply:
    node, pod = core.node, event.pod
    pod_key = pod.uid or pod.name
    for t in node.containers.in_pod(pod_key):
        if t.sandbox_id == pod.id:
            node.drop(t.container_id)
    release_pod(node, pod_key, pod.id, core.node.stopped_sandboxes)
    core.node.stopped_sandboxes.discard(pod.id)
    repin(core)
    core.commit()
    return None


def repin(core: CoreContext) -> None:
    if core.node.waiting:
        for message in repin_waiting(core.node, core.node.waiting):
            log.warning("state repaired", repair=message)


def _release_seeded(core: CoreContext, container_id: str) -> bool:
    key = core.node.seeded.pop(container_id, None)
    if key is None:
        return False
    core.node.state = core.node.engine.remove(core.node.state, *key)
    return True


def release_seeded(core: CoreContext, container_id: str) -> bool:
    return _release_seeded(core, container_id)


def _pod_cpus(core: CoreContext, pod: api.PodSandbox) -> int | None:
    """Pod scope: the pod's exclusive CPU total from its pod-level quota (kubelet sums limits)."""
    if core.settings.topology_manager.scope != "pod":
        return None
    limit = cpu_limit_milli(pod.linux.pod_resources.cpu)
    return guaranteed_cpus(QoS.GUARANTEED, limit, limit) or None
