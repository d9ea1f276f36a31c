"""NRI event handlers: every container gets its cpuset before it starts; shared containers' pool
changes are written into their cgroups by the syncer thread (NRI updates in the reply only for
containers without a cgroup), and an exclusive container's StartContainer waits for those writes,
so an exclusive CPU is never shared (README "Pool changes"). Exited containers of kubelet pods keep
their CPUs for their pod, as the kubelet does (roles.py). Runs on the stub's handler thread; the stub
cuts a handler off at its budget and answers with its `fallback_*` result (`nri_pinner.nri.stub`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import Any

import structlog

from ..config import Settings
from ..engine.admission import AdmissionRequest
from ..engine.cpumanager.static_policy import guaranteed_cpus
from ..engine.cpuset import CPUSet, CPUSetError
from ..engine.qos import QoS
from ..nri.gen import api_pb2 as api
from .cgroup_passes import CgroupSyncer, pass_wait_seconds
from .cgroup_paths import CgroupError
from .checkpoint import Snapshot, checkpoint_entries, held_from_checkpoint, memory_entries
from .checkpoint_writer import CheckpointWriter
from .cpuset_writer import CpusetWriter, unwritable
from .intent import GUARANTEED, IntentError, cpu_limit_milli, intent_from_nri
from .metrics import Metrics
from .nic_lookup import NicLookup
from .rebuild import note_unreadable, rebuild, repin_waiting
from .reply_updates import reply_updates
from .request_intake import Intake
from .resize_handler import Resizer
from .roles import decide_role, mark_sidecars, release_pod, role_at_create
from .systemd_units import SystemdUnits
from .tracker import Containers, Tracked, Tracker

log = structlog.get_logger("nri_pinner.service")

class AdmissionRefused(Exception):
    """Fails the container create, as a kubelet admission failure would fail the pod."""

    refusal = True  # a decision, not a fault: the stub logs it at info


class PinnerPlugin:
    def __init__(self, settings: Settings, tracker: Tracker, metrics: Metrics,
                 prior_checkpoint: dict[str, Any] | None = None, nics: NicLookup | None = None) -> None:
        self.settings, self.tracker, self.metrics = settings, tracker, metrics
        self.nics = nics  # the pods' NIC lookups (hints.providers has "nics")
        self._prior = checkpoint_entries(prior_checkpoint)
        self._seeded: dict[str, tuple[str, str]] = {}  # checkpoint entries held without a Synchronize
        self._waiting: list[str] = []  # Guaranteed containers Synchronize left on the shared pool, oldest first
        self._stopped_sandboxes: set[str] = set()  # StopPodSandbox seen, RemovePodSandbox not yet
        self.intake = Intake(settings)  # device and memory requests for those providers
        self.checkpoints = CheckpointWriter(settings.state.checkpoint)
        rec = settings.reconcile
        units = SystemdUnits(rec.systemd_bus, rec.systemd_timeout_seconds) if rec.systemd_bus else None
        self.writer = CpusetWriter(rec.cgroup_root, rec.cgroup_v1_skip_rebuilds, units) if rec.cgroup_writes else None
        why = unwritable(rec.cgroup_root) if self.writer is not None else ""
        if why:
            log.warning("cgroup writes off: pool changes travel as NRI updates in the replies", reason=why)
            self.writer = None
        self.syncer = CgroupSyncer(tracker, self.writer) if self.writer is not None else None
        self.resizer = Resizer(self)
        self.pass_wait = pass_wait_seconds(0)  # set from the runtime's request timeout at Configure

    # -- helpers (call with the tracker lock held) ----------------------------------------------
    def _pending_updates(self, exclude: str = "") -> list[api.ContainerUpdate]:
        return reply_updates(self.tracker, self.syncer is not None, exclude)

    def _snapshot(self) -> Snapshot:
        tr = self.tracker
        return Snapshot(tr.state, dict(tr.containers), tr.engine.policy.reserved, tr.shared_pool,
                        partial(memory_entries, tr.engine, tr.state))

    def _commit(self) -> None:
        """After every change: publish a view, queue the checkpoint (written behind the reply)."""
        view = self.tracker.publish()
        if self.syncer is not None:
            self.syncer.kick(view.generation)  # started containers' cgroups follow, off this reply
        self.checkpoints.submit(Snapshot(view.state, view.containers, view.engine.policy.reserved, view.shared_pool,
                                         partial(memory_entries, view.engine, view.state)))
        self.metrics.shared_pool_cpus.set(len(self.tracker.shared_pool))
        self.metrics.exclusive_cpus.set(len(self.tracker.state.exclusive_cpus()))

    # -- connection ------------------------------------------------------------------------------
    def configure(self, req: api.ConfigureRequest) -> None:
        self.pass_wait = pass_wait_seconds(req.request_timeout)
        log.info("configured by runtime", runtime=req.runtime_name, version=req.runtime_version,
                 nri_version=req.NRI_version or "unknown", request_timeout_ms=req.request_timeout or None)
        self.metrics.runtime.info({"runtime": req.runtime_name, "version": req.runtime_version,
                                   "nri_version": req.NRI_version or "unknown"})
        self.metrics.nri_reconnects.inc()
        with self.tracker.lock:
            self._seed_from_checkpoint()

    def _seed_from_checkpoint(self) -> None:
        """Hold the checkpoint's exclusive CPUs until Synchronize replaces them with the runtime's view.

        NRI v0.6.1 (containerd 1.7) never synchronizes pre-installed plugins, so without this a
        restarted node could hand a running container's exclusive CPUs to a new one.
        """
        tr = self.tracker
        if tr.containers or not self._prior:
            return
        state, self._seeded, problems = held_from_checkpoint(tr.engine, self._prior)
        for problem in problems:
            log.warning("checkpoint entry ignored", problem=problem)
        tr.state, repairs = tr.engine.policy.start(state)
        for message in repairs:
            log.warning("state repaired", repair=message)
        log.info("holding checkpointed exclusive CPUs until the runtime synchronizes", containers=len(self._seeded),
                 exclusive=str(tr.state.exclusive_cpus()))

    def _release_seeded(self, container_id: str) -> bool:
        key = self._seeded.pop(container_id, None)
        if key is None:
            return False
        self.tracker.state = self.tracker.engine.remove(self.tracker.state, *key)
        return True

    def _read_cgroup(self, cgroups_path: str) -> tuple[CPUSet, str] | None:
        """What a container's cgroup holds (rebuild trusts it over the runtime's stale record)."""
        if self.writer is None:
            return None
        try:
            return self.writer.read(cgroups_path)
        except (CgroupError, CPUSetError):
            return None

    def close(self) -> None:
        """Stop the writer threads (after the last event): the checkpoint is flushed first."""
        if self.syncer is not None:
            self.syncer.close()
        if self.writer is not None:
            self.writer.close()
        self.checkpoints.close()

    def on_close(self) -> None:
        with self.tracker.lock:
            self.tracker.forget_applied()
            # the next Synchronize rebuilds from the runtime; what we know now is the best hint
            self._prior = checkpoint_entries(self._snapshot().body())

    def synchronize(self, pods: list[api.PodSandbox], containers: list[api.Container]) -> list[api.ContainerUpdate]:
        if self.nics is not None:  # NICs of pods that ran before we connected (background, never waited for)
            for p in pods:
                self.nics.start(p)
        tr = self.tracker
        with tr.lock:
            result = rebuild(tr.engine, self._prior, pods, containers, self._read_cgroup)
            tr.state, tr.containers = result.state, Containers(result.containers)
            self._seeded.clear()
            self._waiting = result.waiting
            note_unreadable(result, self.metrics)
            for message in result.repairs:
                log.warning("state repaired", repair=message)
            if self.syncer is not None:  # written here, so a failed write can still ride on this reply
                self.syncer.run_pass()
            updates = self._pending_updates()
            self._commit()
        log.info("synchronized", pods=len(pods), containers=len(containers), repairs=len(result.repairs),
                 updates=len(updates), shared=str(tr.shared_pool))
        return updates

    # -- container lifecycle ---------------------------------------------------------------------
    def create_container(self, req: api.CreateContainerRequest) -> api.CreateContainerResponse:
        started = time.perf_counter()
        try:
            intent = intent_from_nri(req.pod, req.container)
        except IntentError as exc:
            self.metrics.rejected("BadAnnotation")
            self.metrics.bad_input.labels("annotation").inc()
            log.info("create refused: bad annotation", pod=f"{req.pod.namespace}/{req.pod.name}",
                     container=req.container.name, error=str(exc))
            raise AdmissionRefused(f"nri-pinner: {exc}") from exc
        if intent.note:
            self.metrics.bad_input.labels("noderesource").inc()
            log.warning("noderesource.dev/resources not used", pod=f"{req.pod.namespace}/{req.pod.name}",
                        container=intent.container, error=intent.note)
        if self.nics is not None:  # bounded wait, outside the lock; afterwards the NIC provider reads its cache
            self.nics.wait(req.pod)
        tr = self.tracker
        with tr.lock:
            intent = role_at_create(self.tracker, intent)
            mark_sidecars(self.tracker, intent.pod_key, intent.init)
            request = AdmissionRequest(intent.pod_key, intent.container, intent.qos, intent.request_milli,
                                       intent.limit_milli, init=intent.init, restartable=intent.restartable,
                                       pod_exclusive_cpus=self._pod_cpus(req.pod),
                                       **self.intake.extras(req.container, intent.qos == GUARANTEED))
            state, decision = tr.engine.admit(tr.state, request)
            self.metrics.count_providers(decision)
            self.metrics.pinning_requests.inc()
            self.metrics.allocation_seconds.observe(time.perf_counter() - started)
            outcome = "admitted"
            if not decision.admitted:
                self.metrics.rejected(decision.reason)
                tr.record(decision, intent, "rejected")
                log.info("admission rejected", pod=f"{intent.namespace}/{intent.pod_name}",
                            container=intent.container, reason=decision.reason, message=decision.message)
                if self.settings.nri.on_reject == "fail":
                    tr.publish()  # the decision log shows the rejection
                    raise AdmissionRefused(f"nri-pinner: {decision.reason}: {decision.message}")
                self.metrics.fail_open.labels("rejected").inc()
                state, decision = tr.engine.admit(tr.state, replace(request, qos=QoS.BEST_EFFORT))
                outcome = "fail-open"
            tr.state = state
            for old in tr.containers.with_key((intent.pod_key, intent.container)):
                del tr.containers[old.container_id]  # a restarted container replaces the old record
            t = Tracked(intent.container_id, req.container.pod_sandbox_id, intent, req.container.linux.cgroups_path)
            tr.containers[t.container_id] = t
            cpus, mems = tr.desired(t)
            t.applied_cpus, t.applied_mems = cpus, mems
            updates = self._pending_updates(exclude=t.container_id)
            tr.record(decision, intent, outcome)
            self._commit()
            t.start_after = tr.generation
        log.info("container pinned" if decision.exclusive else "container on shared pool",
                 pod=f"{intent.namespace}/{intent.pod_name}", container=intent.container, qos=intent.qos,
                 cpus=str(cpus), mems=mems, exclusive=decision.exclusive, outcome=outcome,
                 shared_updates=len(updates), reason=intent.source)
        response = api.CreateContainerResponse(update=updates)
        response.adjust.linux.resources.cpu.cpus = str(cpus)
        response.adjust.linux.resources.cpu.mems = mems
        return response

    def fallback_create_container(self, req: api.CreateContainerRequest) -> api.CreateContainerResponse:
        """Over budget: the current shared pool (never no cpuset, which would overlap exclusive CPUs), or fail."""
        self.metrics.late_replies.labels("CreateContainer").inc()
        if self.settings.nri.on_timeout == "fail":
            raise AdmissionRefused("nri-pinner: no decision within the runtime's request budget; retry")
        self.metrics.fail_open.labels("timeout").inc()
        pool = self.tracker.shared_pool  # an immutable snapshot; no lock on the wire loop
        log.warning("decision over budget: container starts on the shared pool", container=req.container.name,
                    pod=req.pod.name, cpus=str(pool))
        response = api.CreateContainerResponse()
        response.adjust.linux.resources.cpu.cpus = str(pool)
        return response

    def discarded_reply(self, handler: str, args: tuple[Any, ...], outcome: object) -> None:
        """A late answer never reached the runtime: undo what it decided and resend every cpuset."""
        with self.tracker.lock:
            if handler == "create_container" and isinstance(outcome, api.CreateContainerResponse):
                req = args[0]
                t = self.tracker.containers.get(req.container.id)
                if t is not None:
                    tr = self.tracker
                    tr.state = tr.engine.remove(tr.state, *t.key)
                    if self.settings.nri.on_timeout == "fail":  # the fallback failed the create
                        del tr.containers[t.container_id]
                        log.warning("late decision undone; the create had failed", container=t.key[1])
                    else:
                        shared = AdmissionRequest(t.key[0], t.key[1], QoS.BEST_EFFORT)
                        tr.state, _ = tr.engine.admit(tr.state, shared)
                        log.warning("late decision undone; container stays on the shared pool",
                                    container=t.key[1])
            self.tracker.forget_applied()
            self._commit()

    def update_container(self, req: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        """A kubelet resize or a cpuset-only update (README "Resize"; service/resize_handler.py)."""
        return self.resizer.update_container(req)

    def fallback_update_container(self, req: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        return self.resizer.fallback_update_container(req)

    def update_pod_sandbox(self, req: api.UpdatePodSandboxRequest) -> api.UpdatePodSandboxResponse:
        """A pod-level resize (NRI >= v0.12): checked in pod scope, acted on per container."""
        return self.resizer.update_pod_sandbox(req)

    def start_container(self, event: api.StateChangeEvent) -> None:
        """An exclusive container starts only once no started container's cgroup holds its CPUs."""
        tr = self.tracker
        with tr.lock:
            t = tr.containers.get(event.container.id)
            if t is None:
                return
            t.started = True
            a = tr.assignment(t)
            exclusive = a is not None and a.exclusive
            if self.syncer is not None and (t.applied_cpus, t.applied_mems) != tr.desired(t):
                self.syncer.kick(tr.generation)  # its own cgroup lags (the pool changed since its create)
            # A pass begun after this container got its CPUs narrowed every started neighbour; later
            # changes (a Burstable create beside it) never hand those CPUs back: no newer pass needed.
            generation = t.start_after or tr.generation
        if self.syncer is None or not exclusive:
            return
        if not self.syncer.wait(generation, self.pass_wait):
            self.metrics.late_replies.labels("StartContainer").inc()
            log.warning("shared cgroups not yet written when an exclusive container starts", container=t.key[1],
                        waited_s=self.pass_wait)

    def stop_container(self, req: api.StopContainerRequest) -> api.StopContainerResponse:
        tr = self.tracker
        with tr.lock:
            t = tr.containers.get(req.container.id)
            if t is None:
                if self._release_seeded(req.container.id):
                    self._commit()
                return api.StopContainerResponse(update=self._pending_updates())
            t.stopped = True
            t.exit_code = req.container.exit_code
            a = tr.assignment(t)
            if t.intent.kubelet:
                # kubelet pod: its CPUs (and memory) stay with the pod (module doc); only whether they
                # are reusable by the pod's next container depends on what it was
                if a is not None and not t.intent.role:
                    decide_role(self.tracker, t, final=False)
                updates = self._pending_updates()
                self._commit()
                a = tr.assignment(t)
                log.info("container stopped", container=t.key[1], pod=t.intent.pod_name, released=False,
                         kept_for_pod=str(a.current) if a is not None and a.exclusive else "",
                         role=("init" if t.intent.init else "app") if t.intent.role else "undecided",
                         decided_by=t.intent.role or None, shared=str(tr.shared_pool))
                return api.StopContainerResponse(update=updates)
            # An exited init container's exclusive CPUs and memory blocks stay for its app containers
            # (kubelet reuse; memory even when its CPUs were shared): released at removal.
            keep = a is not None and a.init and not a.restartable and (
                a.exclusive or bool(tr.engine.memory_mems(tr.state, *t.key)))
            if not keep:
                tr.state = tr.engine.remove(tr.state, *t.key)
                self._repin_waiting()
            updates = self._pending_updates()
            self._commit()
        log.info("container stopped", container=t.key[1], pod=t.intent.pod_name,
                 released=not keep and a is not None and a.exclusive, shared=str(tr.shared_pool))
        return api.StopContainerResponse(update=updates)

    def remove_container(self, event: api.StateChangeEvent) -> None:
        tr = self.tracker
        with tr.lock:
            t = tr.containers.pop(event.container.id, None)
            if t is None and self._release_seeded(event.container.id):
                self._commit()
            if t is not None and tr.by_key(t.key) is None:
                tr.state = tr.engine.remove(tr.state, *t.key)
                self._repin_waiting()
                self._commit()

    def run_pod_sandbox(self, event: api.StateChangeEvent) -> None:
        self.intake.pod_started(event.pod)  # PodResources: the background List (never waited for)
        if self.nics is not None:
            self.nics.start(event.pod)  # looked up in the background; the first create waits at most briefly

    def stop_pod_sandbox(self, event: api.StateChangeEvent) -> None:
        """The pod is going (or its sandbox is being recreated): no container of this sandbox runs
        again, so every CPU its containers kept goes back (kubelet: removeStaleState once the pod is
        inactive; see the module doc)."""
        tr = self.tracker
        with tr.lock:
            self._stopped_sandboxes.add(event.pod.id)
            pod_key = event.pod.uid or event.pod.name
            for t in tr.containers.in_pod(pod_key):
                if t.sandbox_id == event.pod.id:
                    t.stopped = True
            released = release_pod(tr, pod_key, event.pod.id, self._stopped_sandboxes)
            if released:
                self._repin_waiting()
            self._commit()
        log.info("pod stopped", pod=f"{event.pod.namespace}/{event.pod.name}", released=str(released),
                 shared=str(tr.shared_pool))

    def remove_pod_sandbox(self, event: api.StateChangeEvent) -> None:
        if self.nics is not None:
            self.nics.forget(event.pod.id)
        tr = self.tracker
        with tr.lock:
            pod_key = event.pod.uid or event.pod.name
            for t in tr.containers.in_pod(pod_key):
                if t.sandbox_id == event.pod.id:
                    del tr.containers[t.container_id]
            release_pod(tr, pod_key, event.pod.id, self._stopped_sandboxes)
            self._stopped_sandboxes.discard(event.pod.id)
            self._repin_waiting()
            self._commit()

    # -- details ---------------------------------------------------------------------------------
    def _repin_waiting(self) -> None:
        if self._waiting:
            for message in repin_waiting(self.tracker, self._waiting):
                log.warning("state repaired", repair=message)

    def _pod_cpus(self, pod: api.PodSandbox) -> int | None:
        """Pod scope: the pod's exclusive CPU total from its pod-level quota (kubelet sums limits)."""
        if self.settings.topology_manager.scope != "pod":
            return None
        res = pod.linux.pod_resources.cpu
        limit = cpu_limit_milli(res)
        return guaranteed_cpus(QoS.GUARANTEED, limit, limit) or None
