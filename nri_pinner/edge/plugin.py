"""The NRI plugin: a thin adapter from the stub's typed handlers to the node core (core/node.py).

Each handler runs on the node thread (the stub's handler thread, owned by the service), does the
I/O the event needs first (the container's devices, the cgroups a Synchronize or an adoption
trusts), hands the core one event, carries out the effects it returns (cgroup passes, checkpoint,
timers, answers to parked replies) and turns its reply into the stub's typed reply. A reply the
core parks (an exclusive container's start, a grown resize, Synchronize: waiting for a cgroup
pass; a create waiting for its pod's NIC lookup) is a `ParkedReply`: the node thread goes on with other
work and resolves it when the result comes back as an event. Other threads reach the core only
through `post` and `ask`, which queue work on the node thread.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from ..config import Settings
from ..core import events as ev
from ..core.effects import (
    ArmTimer,
    CreateNow,
    Expedite,
    ListPodResources,
    Park,
    Refusal,
    Resolve,
    SettleWhenIdle,
    UpdateRuntimeRecords,
    WriteCgroups,
    WriteCheckpoint,
)
from ..core.node import NodeCore, Outcome, Reply
from ..core.reply_updates import cpu_update, view_update
from ..core.resizing import adoptable
from ..core.state import NodeState, Told, View
from ..core.update_inputs import update_needs
from ..engine.admission_engine import Engine
from ..engine.cpuset import CPUSetError
from ..engine.decision import AdmissionExtras
from ..engine.devicemanager.podresources import PodResourcesView
from ..nri.gen import api_pb2 as api
from ..nri.handlers import CreateReply, ParkedReply, UpdatesReply
from ..nri.stub.handler_calls import HandlerThread
from .cgroups.passes import PassWorkers, cgroup_writer
from .cgroups.paths import CgroupError
from .checkpoint.writer import CheckpointWriter
from .clients.podresources import PodResources
from .nic_lookup.lookup import NicLookup
from .observe.core_measures import OBSERVED, carry_out, timed
from .observe.metrics import Metrics
from .replies import expect, resolver
from .request_intake import Intake
from .timers import Timers

if TYPE_CHECKING:
    from ..nri import handlers as h

log = structlog.get_logger("nri_pinner.service")

R = TypeVar("R")


class AdmissionRefused(Exception):
    """Fails the container create, as a kubelet admission failure would fail the pod."""

    refusal = True  # a decision, not a fault: the stub logs it at info


class ResizeRefused(Exception):
    """Fails the NRI UpdateContainer, so containerd fails CRI UpdateContainerResources."""

    refusal = True


class PinnerPlugin:
    def __init__(self, settings: Settings, engine: Engine, metrics: Metrics,
                 prior_checkpoint: dict[str, Any] | None = None, nics: NicLookup | None = None,
                 node_thread: HandlerThread | None = None, podresources: PodResources | None = None) -> None:
        self.settings, self.metrics, self.nics = settings, metrics, nics
        self.thread = node_thread or HandlerThread("nri-pinner-node")
        self.intake = Intake(settings)  # device and memory requests for those providers
        self.intake.podresources = podresources
        self.checkpoints = CheckpointWriter(settings.state.checkpoint)
        self.writer, slices = cgroup_writer(settings.reconcile)  # None: writes off; slices: qos_slices.py
        self.core = NodeCore(settings, engine, prior_checkpoint, cgroup_writes=self.writer is not None,
                             qos_slices=slices)
        self.podresources = podresources
        if podresources is not None:  # init/app roles from the kubelet's List, delivered on the node thread
            podresources.deliver = self._podresources_listed
        self.passes = PassWorkers(self.writer, self.post) if self.writer is not None else None
        self.timers = Timers(self._timer_fired)
        self._parked: dict[int, Callable[[object], None]] = {}  # core token -> who gets the reply
        # core token -> a create parked for its pod's NIC lookup (core/nic_waits.py): its reply, and the lookup
        self._nic_creates: dict[int, tuple[ParkedReply[CreateReply], Future[Any]]] = {}
        # the reconcile edge's way to update the runtime's records (it says `RuntimeRecordUpdatesReady` once set)
        self.record_sender: Callable[[UpdateRuntimeRecords], None] | None = None

    # -- reading the core's state from any thread (published views only) --------------------------
    @property
    def node(self) -> NodeState:
        return self.core.node

    def view(self) -> View:
        view = self.core.node.published
        assert view is not None  # the core publishes at construction
        return view

    @property
    def pass_wait(self) -> float:
        return self.core.passes.wait_seconds

    # -- the core's doorways -----------------------------------------------------------------------
    def handle(self, event: ev.Event) -> Reply:
        """On the node thread: one event through the core, its effects carried out; the reply."""
        outcome, seconds = timed(self.core, event)  # the edge's clock: the core reads none
        self._carry_out(outcome, seconds)
        return outcome.reply

    def post(self, event: ev.Event) -> None:
        """From any thread: the event is handled on the node thread (its reply is dropped)."""
        self.thread.submit(lambda: self._guarded(event))

    def ask(self, event: ev.Event) -> Future[object]:
        """From any thread: the event's reply (a parked one once it is resolved)."""
        future: Future[object] = Future()

        def call() -> None:
            try:
                reply = self.handle(event)
            except Exception as exc:
                future.set_exception(exc)
                return
            self._deliver(reply, future.set_result)

        self.thread.submit(call)
        return future

    def await_pass(self, timeout: float = 5.0) -> bool:
        """From any thread but the node thread: True once the cgroups follow the newest change."""
        try:
            return bool(self.ask(ev.AwaitPass()).result(timeout))
        except TimeoutError:
            return False

    def _podresources_listed(self, view: PodResourcesView | None, asks: int) -> None:  # on the fetcher thread
        source = self.podresources
        assert source is not None

        def adopt() -> None:
            source.adopt(view, asks)
            self._guarded(ev.PodResourcesListed(source.listed_pods()))

        self.thread.submit(adopt)

    def _timer_fired(self, name: str) -> None:  # on the timer thread
        self.post(ev.TimerFired(name))

    def _guarded(self, event: ev.Event) -> None:
        try:
            self.handle(event)
        except Exception as exc:  # the node thread must survive anything one event meets
            log.error("core event failed", event=type(event).__name__, error=repr(exc))

    def _carry_out(self, outcome: Outcome, seconds: float = 0.0) -> None:
        for effect in outcome.effects:
            if isinstance(effect, WriteCgroups):
                assert self.passes is not None
                self.passes.submit(effect)
            elif isinstance(effect, Expedite):
                assert self.passes is not None
                self.passes.expedite(effect.pass_id)
            elif isinstance(effect, WriteCheckpoint):
                self.checkpoints.submit(effect.snapshot)
            elif isinstance(effect, OBSERVED):  # counters, and a decision timed (``seconds``: the core's)
                carry_out(self.metrics, effect, seconds)
            elif isinstance(effect, ArmTimer):
                self.timers.arm(effect.name, effect.seconds)
            elif isinstance(effect, UpdateRuntimeRecords):
                if self.record_sender is not None:
                    self.record_sender(effect)
                else:
                    none = [ev.RecordResult(i.container_id, "", "no runtime path") for i in effect.items]
                    self.post(ev.RuntimeRecordsUpdated(effect.sync_id, none))
            elif isinstance(effect, SettleWhenIdle):
                self.thread.submit_idle(effect.settle)
            elif isinstance(effect, ListPodResources):
                if self.podresources is not None:
                    self.podresources.refresh()
            elif isinstance(effect, CreateNow):
                self._create_now(effect)
            elif isinstance(effect, Resolve):
                deliver = self._parked.pop(effect.token, None)
                if deliver is not None:
                    deliver(effect.reply)

    def _deliver(self, reply: Reply, resolve: Callable[[object], None]) -> None:
        """Hand the core's reply to ``resolve`` now, or when its parked token is resolved."""
        if isinstance(reply, Park):
            self._parked[reply.token] = resolve
        else:
            resolve(reply)

    @staticmethod
    def _raise_refusal(reply: Reply) -> None:
        if isinstance(reply, Refusal):
            raise (ResizeRefused if reply.kind == "resize" else AdmissionRefused)(reply.message)

    def _answer(self, reply: Reply, want: type[R]) -> R | ParkedReply[R]:
        """The core's reply as the stub takes it: a refusal raised, a parked reply deferred, any other
        reply checked to be a ``want``."""
        self._raise_refusal(reply)
        if isinstance(reply, Park):
            deferred: ParkedReply[R] = ParkedReply()
            self._deliver(reply, resolver(deferred, want))
            return deferred
        return expect(reply, want)

    # -- I/O an event needs before the core sees it -------------------------------------------------
    def _read_cgroup(self, cgroups_path: str) -> Told | None:
        """What a container's cgroup holds (rebuild trusts it over the runtime's stale record)."""
        if self.writer is None or not cgroups_path:
            return None
        try:
            return self.writer.read(cgroups_path)
        except (CgroupError, CPUSetError):
            return None

    def _read_cgroups(self, containers: list[api.Container]) -> dict[str, Told | None]:
        if self.writer is None:
            return {}
        return {c.linux.cgroups_path: self._read_cgroup(c.linux.cgroups_path)
                for c in containers if c.linux.cgroups_path and c.state == api.CONTAINER_RUNNING}

    # -- connection ----------------------------------------------------------------------------------
    def configure(self, req: api.ConfigureRequest) -> None:
        log.info("configured by runtime", runtime=req.runtime_name, version=req.runtime_version,
                 nri_version=req.NRI_version or "unknown", request_timeout_ms=req.request_timeout or None)
        self.metrics.runtime.info({"runtime": req.runtime_name, "version": req.runtime_version,
                                   "nri_version": req.NRI_version or "unknown"})
        self.metrics.nri_reconnects.inc()
        self.handle(ev.Configured(req.request_timeout))

    def synchronize(self, pods: list[api.PodSandbox], containers: list[api.Container]
                    ) -> UpdatesReply | ParkedReply[UpdatesReply]:
        if self.nics is not None:  # NICs of pods that ran before we connected (background, never waited for)
            for p in pods:
                self.nics.start(p)
        reply = self.handle(ev.Synchronize(pods, containers, self._read_cgroups(containers)))
        return self._answer(reply, UpdatesReply)

    def on_close(self) -> None:
        self.handle(ev.ConnectionClosed())

    def discarded_reply(self, handler: str, args: tuple[Any, ...], outcome: object) -> None:
        """A late answer never reached the runtime: undo what it decided and resend every cpuset."""
        cid = args[0].container.id if handler == "create_container" and args else ""
        self.handle(ev.ReplyDiscarded(handler, cid if isinstance(outcome, CreateReply) else ""))

    def close(self) -> None:
        """Stop the worker threads (after the last event): the checkpoint is flushed first."""
        if self.passes is not None:
            self.passes.close()
        self.timers.close()
        if self.writer is not None:
            self.writer.close()
        self.checkpoints.close()

    # -- container lifecycle -------------------------------------------------------------------------
    def create_container(self, req: api.CreateContainerRequest) -> CreateReply | ParkedReply[CreateReply]:
        if self.nics is not None:  # the pod's NIC lookup: parked (never a blocked thread) while it runs
            lookup = self.nics.start(req.pod)
            if not lookup.done():
                return self._after_nic_lookup(req, lookup)
        return self._answer(self._core_create(req), CreateReply)

    def _core_create(self, req: api.CreateContainerRequest) -> Reply:
        extras = self.intake.extras(req.container, True)  # the core drops memory unless Guaranteed
        return self.handle(ev.CreateContainer(req, extras))

    def _after_nic_lookup(self, req: api.CreateContainerRequest, lookup: Future[Any]) -> ParkedReply[CreateReply]:
        """Parked until the core says the wait is over (core/nic_waits.py: the lookup done, or its limit)."""
        assert self.nics is not None
        park = self.handle(ev.AwaitNics(req, self.nics.wait_seconds))  # the core arms the wait's timer
        assert isinstance(park, Park)
        deferred: ParkedReply[CreateReply] = ParkedReply()
        self._nic_creates[park.token] = (deferred, lookup)
        lookup.add_done_callback(lambda _f: self.post(ev.NicsLookedUp(park.token)))
        return deferred

    def _create_now(self, effect: CreateNow) -> None:
        """A create's NIC wait is over: its extras read now, the core's reply answers the parked one."""
        deferred, lookup = self._nic_creates.pop(effect.token, (None, None))
        if deferred is None or lookup is None or deferred.done:  # done: answered meanwhile (the budget's fallback)
            return
        if effect.late and not lookup.done() and self.nics is not None:  # not finished since the timer fired
            self.nics.note_late(effect.req.pod)
        try:
            reply = self._core_create(effect.req)
            self._raise_refusal(reply)
        except Exception as exc:
            deferred.fail(exc)
            return
        self._deliver(reply, resolver(deferred, CreateReply))

    def fallback_create_container(self, req: api.CreateContainerRequest) -> CreateReply:
        """Over budget: the current shared pool (never no cpuset, which would overlap exclusive CPUs), or fail."""
        self.metrics.late_replies.labels("CreateContainer").inc()
        if self.settings.nri.on_timeout == "fail":
            raise AdmissionRefused("nri-pinner: no decision within the runtime's request budget; retry")
        self.metrics.fail_open.labels("timeout").inc()
        pool = self.view().shared_pool  # an immutable snapshot; no lock on the wire loop
        log.warning("decision over budget: container starts on the shared pool", container=req.container.name,
                    pod=req.pod.name, cpus=str(pool))
        return CreateReply(str(pool))

    def start_container(self, event: api.StateChangeEvent) -> ParkedReply[None] | None:
        return self._answer(self.handle(ev.StartContainer(event.container.id)), type(None))

    def stop_container(self, req: api.StopContainerRequest) -> UpdatesReply | ParkedReply[UpdatesReply]:
        return self._answer(self.handle(ev.StopContainer(req.container.id, req.container.exit_code)), UpdatesReply)

    def remove_container(self, event: api.StateChangeEvent) -> None:
        self.handle(ev.RemoveContainer(event.container.id))

    def run_pod_sandbox(self, event: api.StateChangeEvent) -> None:
        self.intake.pod_started(event.pod)  # PodResources: the background List (never waited for)
        if self.nics is not None:
            self.nics.start(event.pod)  # looked up in the background; the first create waits at most briefly

    def stop_pod_sandbox(self, event: api.StateChangeEvent) -> None:
        self.handle(ev.StopPodSandbox(event.pod))

    def remove_pod_sandbox(self, event: api.StateChangeEvent) -> None:
        if self.nics is not None:
            self.nics.forget(event.pod.id)
        self.handle(ev.RemovePodSandbox(event.pod))

    # -- updates -------------------------------------------------------------------------------------
    def update_container(self, req: api.UpdateContainerRequest) -> UpdatesReply | ParkedReply[UpdatesReply]:
        """A kubelet resize or a cpuset-only update (README "Resize"; core/resizing.py)."""
        needs = update_needs(self.core.node, req)  # the core says what to read (core/update_inputs.py)
        extras = self.intake.extras(req.container, False) if needs.extras else AdmissionExtras()
        cgroups = {needs.cgroup: self._read_cgroup(needs.cgroup)} if needs.cgroup else {}
        return self._answer(self.handle(ev.UpdateContainer(req, extras, cgroups)), UpdatesReply)

    def fallback_update_container(self, req: api.UpdateContainerRequest) -> UpdatesReply:
        """Over budget: the container's cpuset from the newest published view (lock-free, on the wire
        loop), never an empty answer, with which runc would apply containerd's stale create-time set.
        A late resize still lands: its result is discarded and every cpuset is resent."""
        self.metrics.late_replies.labels("UpdateContainer").inc()
        view = self.core.node.published
        t = view.containers.get(req.container.id) if view is not None else None
        if view is None or (t is not None and t.stopped) or (t is None and not adoptable(req)):
            return UpdatesReply()
        engine = view.engine
        if t is None:  # unknown (adopted by the late handler): never on CPUs that may be exclusive now
            pool = view.shared_pool
            return UpdatesReply((cpu_update(req.container.id, pool, engine.mems_of(pool)),))
        update = view_update(view, t, self.core.quotas.enabled)  # an exclusive one's quota stays removed
        log.warning("update over budget: answered with the container's current cpuset", container=t.key[1],
                    cpus=update.cpus)
        return UpdatesReply((update,))

    def update_pod_sandbox(self, req: api.UpdatePodSandboxRequest) -> None:
        """A pod-level resize (NRI >= v0.12): checked in pod scope, acted on per container."""
        self.handle(ev.UpdatePodSandbox(req))


if TYPE_CHECKING:
    def _typed(p: PinnerPlugin) -> None:  # mypy checks the plugin against the stub's handler interface
        handlers: list[object] = []
        configure: h.ConfigureHandler = p
        synchronize: h.SynchronizeHandler = p
        create: h.CreateContainerHandler = p
        create_fallback: h.CreateContainerFallback = p
        start: h.StartContainerHandler = p
        stop: h.StopContainerHandler = p
        remove: h.RemoveContainerHandler = p
        run_pod: h.RunPodSandboxHandler = p
        stop_pod: h.StopPodSandboxHandler = p
        remove_pod: h.RemovePodSandboxHandler = p
        update: h.UpdateContainerHandler = p
        update_fallback: h.UpdateContainerFallback = p
        update_pod: h.UpdatePodSandboxHandler = p
        discarded: h.DiscardedReplyHook = p
        closed: h.CloseHook = p
        handlers += [configure, synchronize, create, create_fallback, start, stop, remove, run_pod, stop_pod,
                     remove_pod, update, update_fallback, update_pod, discarded, closed]
