"""NRI UpdateContainer: a kubelet in-place resize applied through `Engine.resize` (README "Resize").

Rule (README "Our updates and the kubelet's"): cpus set, shares and quota unset = a cpuset-only
update (ours coming back, or someone else's: undone); shares or quota set = a kubelet resize.
The new request comes from the shares (the inverse of the kubelet's MilliCPUToShares), the
limit from quota/period, as for a create (`intent.py`).

No window (README "Resize: ordering"): when a resize gives the container CPUs it did not have
(grow, to-exclusive), the reply waits (bounded, like an exclusive StartContainer) for a cgroup
pass that narrows the shared containers first and only then writes the container's grown set;
the reply then carries the grown set, which runc update writes once more. Replying with the old
set instead would race: runc update applies the reply *after* the pass and would put the old set
back. On a shrink the same pass writes the container's smaller set before it widens the pool,
so the reply does not wait. A refusal fails the call (`ResizeRefused`): runc update is not run,
the container keeps everything it had, and the kubelet retries.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from ..engine.admission import AdmissionRequest
from ..engine.cpumanager.resize import ResizeDecision
from ..engine.cpumanager.static_policy import guaranteed_cpus
from ..engine.cpuset import CPUSet, CPUSetError
from ..nri.gen import api_pb2 as api
from .intent import GUARANTEED, cpu_limit_milli, shares_to_milli
from .rebuild import note_unreadable, rebuild
from .reply_updates import cpu_update
from .tracker import Tracked, desired_of

if TYPE_CHECKING:
    from .plugin import PinnerPlugin

log = structlog.get_logger("nri_pinner.service")

class ResizeRefused(Exception):
    """Fails the NRI UpdateContainer, so containerd fails CRI UpdateContainerResources."""

    refusal = True  # a decision, not a fault: the stub logs it at info


def is_resize(cpu: Any) -> bool:
    """Shares or quota set: the kubelet's update (ours and other cpuset-only writers set neither)."""
    return bool(cpu.shares.value or cpu.quota.value)


def requested(t: Tracked, resources: api.LinuxResources) -> tuple[int, int]:
    """(request, limit) in millicores from an update's LinuxResources."""
    cpu = resources.cpu
    request = shares_to_milli(int(cpu.shares.value)) if cpu.HasField("shares") else t.intent.request_milli
    limit = cpu_limit_milli(cpu)
    if t.intent.qos == GUARANTEED and limit == 0:  # quota off (DisableCPUQuotaWithExclusiveCPUs): limit = request
        limit = request
    return request, limit


class Resizer:
    def __init__(self, plugin: PinnerPlugin) -> None:
        self.plugin = plugin

    def update_container(self, req: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        """Answer every update of a tracked container with its cpuset (after a resize: the new one).

        containerd merges a CRI update into its stored spec, which still holds the cpuset from the
        create (our cgroup writes never reach it), and hands all of it to runc: without our answer
        a kubelet resize would put a shared container back on CPUs that are exclusive now.
        """
        p, tr = self.plugin, self.plugin.tracker
        cpu = req.linux_resources.cpu
        wait_for = 0
        with tr.lock:
            t = tr.containers.get(req.container.id) or self._adopt(req)
            if t is None:
                return self._unknown(req)
            if t.stopped:
                return api.UpdateContainerResponse(update=p._pending_updates())
            resized = is_resize(cpu)
            if resized:
                wait_for = self._resize(t, req)
            else:
                desired = tr.desired(t)[0]
                try:
                    asked: CPUSet | None = CPUSet.parse(cpu.cpus) if cpu.cpus else None
                except CPUSetError:
                    asked = None
                if asked != desired:
                    log.warning("cpuset changed through CRI by someone else; restoring", container=t.key[1],
                                asked=cpu.cpus, desired=str(desired))
            if not wait_for:
                return self._reply(t, resized)
        assert p.syncer is not None
        if not p.syncer.wait(wait_for, p.pass_wait):
            p.metrics.late_replies.labels("UpdateContainer").inc()
            log.warning("shared cgroups not yet narrowed when a grown container is answered", container=t.key[1],
                        waited_s=p.pass_wait)
        with tr.lock:
            return self._reply(t, True)

    def fallback_update_container(self, req: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        """Over budget: the container's cpuset from the newest published view (lock-free, on the wire
        loop), never an empty answer, with which runc would apply containerd's stale create-time set.
        A late resize still lands: its result is discarded and the syncer writes every cgroup again."""
        self.plugin.metrics.late_replies.labels("UpdateContainer").inc()
        view = self.plugin.tracker.published
        t = view.containers.get(req.container.id) if view is not None else None
        if view is None or (t is not None and t.stopped) or (t is None and not _adoptable(req)):
            return api.UpdateContainerResponse()
        engine = view.engine
        if t is None:  # unknown (adopted by the late handler): never on CPUs that may be exclusive now
            pool = view.shared_pool
            return api.UpdateContainerResponse(update=[cpu_update(
                req.container.id, pool, ",".join(map(str, engine.mems_of(pool))))])
        cpus, mems = desired_of(engine, view.state, view.shared_pool, t.key,
                                lambda c: ",".join(map(str, engine.mems_of(c))))
        log.warning("update over budget: answered with the container's current cpuset", container=t.key[1],
                    cpus=str(cpus))
        return api.UpdateContainerResponse(update=[cpu_update(t.container_id, cpus, mems)])

    def update_pod_sandbox(self, req: api.UpdatePodSandboxRequest) -> api.UpdatePodSandboxResponse:
        """A pod-level resize (NRI >= v0.12 runtimes; older ones never subscribe us to it).

        The CPUs move in the containers' own UpdateContainer calls, which the kubelet sends after
        this one. In pod scope the pod's exclusive total is what the topology manager aligned, so
        a grow the node cannot give is reported here, before its container updates are refused.
        The reply has no fields to adjust; this call never fails.
        """
        p, tr = self.plugin, self.plugin.tracker
        pod_key = req.pod.uid or req.pod.name
        limit = cpu_limit_milli(req.linux_resources.cpu)
        wanted = guaranteed_cpus(GUARANTEED, limit, limit) if p.settings.topology_manager.scope == "pod" else 0
        with tr.lock:
            held = sum(len(a.current) for a in tr.state.pod_assignments(pod_key) if a.exclusive)
            free = len(tr.engine.policy.available_for_exclusive(tr.state))
        fits = not wanted or wanted - held <= free
        fields = {"pod": f"{req.pod.namespace}/{req.pod.name}", "cpu_limit_milli": limit,
                  "pod_exclusive_cpus": held, "wanted": wanted or None, "free": free}
        if fits:
            log.info("pod resized", **fields)
        else:
            log.warning("pod resize cannot get its exclusive CPUs; its containers' updates will be refused", **fields)
        return api.UpdatePodSandboxResponse()

    def _adopt(self, req: api.UpdateContainerRequest) -> Tracked | None:
        """Track a running container this update names but Synchronize did not list (README "Resize":
        unknown containers): containerd 1.7 never synchronizes a pre-installed plugin, and a runtime
        that has not loaded every container yet leaves them out. It is placed by the rebuild rules
        (`rebuild` into the current state): its cgroup's cpuset trusted, a Guaranteed integer one
        keeps exclusive CPUs it runs on (or its checkpointed ones) when they are free, otherwise it
        is admitted again or waits on the shared pool. None when it cannot be placed. Lock held."""
        p, tr, c = self.plugin, self.plugin.tracker, req.container
        if not _adoptable(req):
            return None
        if any(o.key[1] == c.name for o in tr.containers.in_pod(req.pod.uid or req.pod.name)):
            return None  # another instance holds its name (and engine record): the create replaces it
        p._release_seeded(c.id)  # the checkpoint's hold: `rebuild` gives these CPUs back from the entry
        entry = p._prior.get(c.id)
        result = rebuild(tr.engine, {c.id: entry} if entry is not None else {}, [req.pod], [c], p._read_cgroup,
                         start=tr.state)
        t = result.containers.get(c.id)
        if t is None:
            return None
        tr.state = result.state
        tr.containers[c.id] = t
        p._waiting.extend(result.waiting)
        note_unreadable(result, p.metrics)
        for message in result.repairs:
            log.warning("state repaired", repair=message)
        log.warning("container not known from Synchronize adopted on its update", pod=f"{req.pod.namespace}/"
                    f"{req.pod.name}", container=c.name, container_id=c.id[:12], cpus=str(tr.desired(t)[0]),
                    exclusive=bool((a := tr.state.get(*t.key)) and a.exclusive))
        p._commit()
        return t

    def _unknown(self, req: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        """A container that cannot be adopted: the shared pool for a running one, never no cpuset (with
        which runc would apply containerd's stale create-time set, possibly on exclusive CPUs)."""
        tr, c = self.plugin.tracker, req.container
        updates = self.plugin._pending_updates()
        if c.id and c.state != api.CONTAINER_STOPPED:
            pool = tr.shared_pool
            log.warning("update of an unknown container answered with the shared pool", container_id=c.id[:12],
                        container=c.name, cpus=str(pool))
            updates.insert(0, cpu_update(c.id, pool, ",".join(map(str, tr.engine.mems_of(pool)))))
        return api.UpdateContainerResponse(update=updates)

    def _reply(self, t: Tracked, resized: bool) -> api.UpdateContainerResponse:
        """The container's set (the runtime applies it with the update), plus pool changes for
        containers without a cgroup. Call with the tracker lock held. After a resize a started
        container's record is left to the syncer, whose ordered pass writes it."""
        tr = self.plugin.tracker
        desired, mems = tr.desired(t)
        if not (resized and t.started and self.plugin.syncer is not None):
            t.applied_cpus, t.applied_mems = desired, mems
        updates = [cpu_update(t.container_id, desired, mems), *self.plugin._pending_updates(exclude=t.container_id)]
        return api.UpdateContainerResponse(update=updates)

    def _resize(self, t: Tracked, req: api.UpdateContainerRequest) -> int:
        """Apply a kubelet resize (lock held); returns the generation the reply must wait for (0: none)."""
        p, tr = self.plugin, self.plugin.tracker
        started = time.perf_counter()
        request, limit = requested(t, req.linux_resources)
        before = tr.desired(t)[0]
        if t.intent.source != "cgroup":  # the pod's annotation fixes the CPUs; the kubelet's values do not
            self._note(t, "annotation", "", before, before, request, limit,
                       "CPUs come from a nri-pinner.io annotation; resize keeps them")
            return 0
        state, d = tr.engine.resize(tr.state, *t.key, t.intent.qos, request, limit, like=self._like(t, req))
        if not d.applied:
            self._note(t, "refused", d.reason, before, before, request, limit, d.message)
            tr.publish()  # status shows the refusal
            raise ResizeRefused(f"nri-pinner: resize of {t.key[1]!r} to {request}m/{limit}m refused: "
                                f"{d.reason}: {d.message}; the container keeps CPUs {before}")
        tr.state = state
        t.intent = replace(t.intent, request_milli=request, limit_milli=limit)
        after = tr.desired(t)[0]
        self._note(t, d.kind, "", before, after, request, limit, "", d, time.perf_counter() - started)
        p._commit()  # kicks the syncer: narrowing writes first, then widening (cgroup_passes)
        if not t.started:
            t.start_after = tr.generation  # its start waits for a pass that saw the new CPUs
        if d.added and t.started and p.syncer is not None:
            return tr.generation
        return 0

    def _like(self, t: Tracked, req: api.UpdateContainerRequest) -> AdmissionRequest | None:
        """What a create of this container is asked beyond its CPUs (its devices; the NIC provider
        reads the pod's NICs itself), for the fresh admission of fractional -> integer; None for a
        container that is exclusive already (a grow stays inside its admitted affinity). Its memory
        is the blocks it holds (`Engine.resize`), not the update's limits: a resize never allocates
        memory. No pod total: the update's pod record has the create-time pod resources (stale)."""
        a = self.plugin.tracker.state.get(*t.key)
        if a is None or a.exclusive:
            return None
        extras = self.plugin.intake.extras(req.container, t.intent.qos == GUARANTEED)
        extras.pop("memory", None)
        return AdmissionRequest(*t.key, t.intent.qos, init=t.intent.init, restartable=t.intent.restartable, **extras)

    def _note(self, t: Tracked, outcome: str, reason: str, before: CPUSet, after: CPUSet, request: int,
              limit: int, message: str, d: ResizeDecision | None = None, seconds: float = 0.0) -> None:
        """Log, count and remember (for status) one resize."""
        entry: dict[str, Any] = {"outcome": outcome, "before": str(before), "after": str(after),
                                 "request_milli": request, "limit_milli": limit, "at": time.time()}
        if d is not None:
            entry.update(kept=str(d.kept), added=str(d.added), released=str(d.released))
        if reason:
            entry.update(reason=reason, message=message)
        t.last_resize = entry
        self.plugin.metrics.resizes.labels(outcome, reason).inc()
        who = {"pod": f"{t.intent.namespace}/{t.intent.pod_name}", "container": t.key[1]}
        if outcome == "refused":
            log.info("resize refused", **who, reason=reason, message=message, before=str(before),
                     request_milli=request, limit_milli=limit)
        else:
            log.info("container resized", **who, kind=outcome, before=str(before), after=str(after),
                     request_milli=request, limit_milli=limit, **({"note": message} if message else {}),
                     **({"kept": str(d.kept), "added": str(d.added), "released": str(d.released),
                         "decision_ms": round(seconds * 1000, 3)} if d is not None else {}))


def _adoptable(req: api.UpdateContainerRequest) -> bool:
    """What `rebuild` places: a container that is not stopped, of the pod the update names."""
    c = req.container
    return bool(c.id) and c.state != api.CONTAINER_STOPPED and bool(req.pod.id) and c.pod_sandbox_id == req.pod.id
