"""The node core: the one owner of node state (h11's shape; the kubelet's one writer of State).

`NodeCore.handle(event)` takes one event (core/events.py) and returns an `Outcome`: the reply for the
event, if it has one (a `Park` when the reply must wait for a cgroup pass), and the effects the edge
must carry out (core/effects.py). It does no I/O, takes no lock and starts no thread; one thread
(the node thread, which also runs the NRI handlers) calls it, and the results of its effects come
back as events on that thread's queue. What it decides is published as an immutable `View` after
each change, for readers on other threads (status, metrics, the stub's budget fallbacks).

It reads no clock and calls no metrics object (tests/core/test_core_no_clock.py): wall time comes in
on the events that need it (stamped by the edge), the edge times a decision around `handle` (a `Timed`
effect says which), counters leave as `Count` effects, and the pool gauges are read from the view.

The rules live beside it: container lifecycle (`lifecycle.py`), resize (`resizing.py`), connection
and Synchronize (`connection.py`), drift and hotplug (`repairs.py`), cgroup passes and parked replies
(`passes.py`); who is init or app (`roles.py`), what the kubelet meant (`intent.py`), rebuilding
(`rebuild.py`), the checkpoint (`checkpoint.py`), which updates a reply carries (`reply_updates.py`),
what an update needs read (`update_inputs.py`), creates waiting for their pod's NICs (`nic_waits.py`).
The rules and the books (passes, runtime record updates, pod quotas, QoS slices) are handed this core as a
`CoreContext` (`context.py`: the state, the settings, the books, and `emit`/`count`/`commit`/...), never as
itself (tests/core/test_handler_context.py); what they keep between events lives in the state (`state.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from ..engine.admission_engine import Decision, Engine
from . import connection, lifecycle, nic_waits, quotas, repairs, resizing
from .checkpoint import Snapshot, checkpoint_entries, entry_extras
from .context import Drifts, Reply
from .effects import Count, Effect, ListPodResources, Park, Refusal, Resolve, SettleWhenIdle, WriteCheckpoint
from .events import (
    AwaitNics,
    AwaitPass,
    CgroupsWritten,
    Configured,
    ConnectionClosed,
    CpusetsRead,
    CreateContainer,
    DriftCheck,
    Event,
    NicsLookedUp,
    PodResourcesListed,
    RemoveContainer,
    RemovePodSandbox,
    ReplyDiscarded,
    RuntimeRecordsUpdated,
    RuntimeRecordUpdatesReady,
    RuntimeRepaired,
    StartContainer,
    StopContainer,
    StopPodSandbox,
    Synchronize,
    TimerFired,
    TopologyChanged,
    UpdateContainer,
    UpdatePodSandbox,
    WriteResult,
)
from .intent import ContainerIntent
from .passes import PassPlanner
from .qos_slices import QosSlices
from .runtime_record_updates import RETRY_TIMER as RECORDS_RETRY_TIMER
from .runtime_record_updates import TIMER as RECORDS_TIMER
from .runtime_record_updates import RuntimeRecordUpdater
from .state import NodeState

if TYPE_CHECKING:
    from ..config import Settings  # a type only: the settings module reads and checks files
    from .effects import CounterName

@dataclass
class Outcome:
    reply: Reply = None
    effects: list[Effect] = field(default_factory=list)


class NodeCore:
    def __init__(self, settings: Settings, engine: Engine, prior: Mapping[str, Any] | None = None,
                 cgroup_writes: bool = True, qos_slices: Sequence[str] | None = None) -> None:
        self.settings = settings
        # the state, with what the rules keep between events (the checkpoint's entries: hints for rebuild)
        self.node = NodeState(engine, engine.initial_state(), cgroup_writes=cgroup_writes,
                              prior=checkpoint_entries(prior))
        # the books: each is handed this core as a `CoreContext` (core/context.py), never as itself
        self.passes = PassPlanner(self)
        self.records = RuntimeRecordUpdater(self, settings.reconcile.runtime_record_quiet_seconds)
        self.quotas = quotas.QuotaBook(self)  # pods' cgroups left without a CFS quota
        # the shared pool held on the QoS slices (cgroup v2, systemd driver): None = not, else the QoS slices
        # the edge found (more are learnt from containers' cgroups paths)
        self.slices = QosSlices(self, qos_slices is not None and cgroup_writes, qos_slices or ())
        self.nic_waits = nic_waits.NicWaits(self)  # creates waiting for their pod's NIC lookup
        self.effects: list[Effect] = []  # of the event being handled (handlers add through `emit`)
        self.node.publish()

    # -- the one entry point ---------------------------------------------------------------------
    def handle(self, event: Event) -> Outcome:
        self.effects = []
        reply = self._dispatch(event)
        return Outcome(reply, self.effects)

    def _dispatch(self, event: Event) -> Reply:
        match event:
            case CreateContainer():
                return lifecycle.create(self, event)
            case AwaitNics():
                return self.nic_waits.park(event)
            case NicsLookedUp():
                self.nic_waits.looked_up(event.token)
                return None
            case StartContainer():
                return lifecycle.start(self, event)
            case StopContainer():
                return lifecycle.stop(self, event)
            case RemoveContainer():
                return lifecycle.remove(self, event)
            case StopPodSandbox():
                return lifecycle.stop_pod(self, event)
            case RemovePodSandbox():
                return lifecycle.remove_pod(self, event)
            case UpdateContainer():
                return resizing.update_container(self, event)
            case UpdatePodSandbox():
                return resizing.update_pod_sandbox(self, event)
            case Synchronize():
                return connection.synchronize(self, event)
            case Configured():
                return connection.configure(self, event)
            case ConnectionClosed():
                return connection.forget_connection(self)
            case ReplyDiscarded():
                return connection.undo_discarded_reply(self, event)
            case CgroupsWritten():
                return self.passes.written(event)
            case TimerFired():
                if event.name == RECORDS_TIMER:
                    return self.records.timer()
                if event.name == RECORDS_RETRY_TIMER:
                    return self.records.retry()
                if event.name.startswith(nic_waits.TIMER):
                    self.nic_waits.timer(event.name)
                    return None
                if event.name in (quotas.CHECK_TIMER, quotas.RESIZE_TIMER):
                    self.quotas.timer(event.name)
                    return None
                return self.passes.timer(event.name)
            case AwaitPass():
                if not self.node.cgroup_writes:
                    return True
                return self.park_until_pass(self.node.generation, lambda late: not late, "AwaitPass")
            case DriftCheck():
                return repairs.list_probes(self)
            case CpusetsRead():
                return repairs.decide_repairs(self, event)
            case RuntimeRepaired():
                return repairs.runtime_repaired(self, event)
            case TopologyChanged():
                return repairs.topology_changed(self, event)
            case RuntimeRecordUpdatesReady():
                return self.records.became_ready(event)
            case RuntimeRecordsUpdated():
                return self.records.synced(event)
            case PodResourcesListed():
                self.node.listed_pods = event.pods  # read at the next create or stop (roles.py)
                return None
        raise TypeError(f"not a core event: {event!r}")

    # -- what every change ends with -------------------------------------------------------------
    def commit(self) -> None:
        """The one commit path: publish a view, checkpoint it (written behind the reply), and have the
        started containers' cgroups follow (a pass, after a short settle)."""
        node = self.node
        view = node.publish()
        self.effects.append(WriteCheckpoint(Snapshot(view.state, view.containers, view.engine.policy.reserved,
                                                     view.shared_pool, partial(entry_extras, view.engine,
                                                                               view.state))))
        if node.cgroup_writes:
            self.passes.want(view.generation)
            self.records.changed()

    def count(self, counter: CounterName, *labels: str) -> None:
        """One more of a counter: handed to the edge as an effect (the core calls no metrics object)."""
        self.effects.append(Count(counter, labels))

    def emit(self, effect: Effect) -> None:
        """An effect of the event being handled. One List and one batch of hint summaries to settle per
        event: a second `ListPodResources` is dropped, a second `SettleWhenIdle` joins the first."""
        for i, had in enumerate(self.effects):
            if isinstance(effect, ListPodResources) and isinstance(had, ListPodResources):
                return
            if isinstance(effect, SettleWhenIdle) and isinstance(had, SettleWhenIdle):
                self.effects[i] = SettleWhenIdle(had.summaries + effect.summaries)
                return
        self.effects.append(effect)

    def record(self, decision: Decision, intent: ContainerIntent, outcome: str) -> None:
        """A decision into the log; its hint summaries, if not formatted yet, to the edge to settle when idle."""
        unsettled = self.node.record(decision, intent, outcome)
        if unsettled is not None:
            self.emit(SettleWhenIdle((unsettled,)))

    def refuse(self, message: str, kind: str = "admission") -> Refusal:
        return Refusal(message, kind)

    def park_until_pass(self, generation: int, reply: Callable[[bool], Reply], what: str) -> Reply:
        """The reply once a pass begun at `generation` or later has written the cgroups: now if one has;
        else parked (`reply(late)` is called when it has, or with late=True at the wait's limit)."""
        return self.passes.park(generation, reply, what)

    def repair_results(self, results: Sequence[WriteResult]) -> None:
        repairs.after_pass(self, results)

    def resolve(self, token: int, reply: Reply) -> None:
        self.effects.append(Resolve(token, reply))


__all__ = ["Drifts", "NodeCore", "Outcome", "Park", "Refusal", "Reply"]
