"""What the core's rules are handed: `CoreContext`, the node core as its handlers see it (the kubelet's
`Policy.Allocate(s state.State, ...)` shape: a policy gets the state, never the manager that owns it).

The container lifecycle (`lifecycle.py`), resize (`resizing.py`), connection (`connection.py`), drift and
hotplug (`repairs.py`), and the books (the cgroup passes' `PassPlanner`, the runtime records'
`RuntimeRecordUpdater`, the pod quotas' `QuotaBook`, the QoS slices' `QosSlices`) read and change the node's
state (`NodeState`, with everything the rules keep between events) and the settings, and hand back what the
edge must do only through this: `emit` an effect, `count`, `commit` a change, park a reply until a pass,
`resolve` a parked one, `record` a decision, `refuse`. The one owner of the state (core/node.py) implements
it; no rule imports it.

`Reply` is what an event is answered with (the node core's `handle`, core/node.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from ..nri.handlers import CreateReply, UpdatesReply
from .effects import Park, Refusal
from .repairs import Drift, DriftProbe

if TYPE_CHECKING:
    from ..config import Settings  # a type only: the settings module reads and checks files
    from ..engine.admission_engine import Decision
    from .effects import CounterName, Effect
    from .events import WriteResult
    from .intent import ContainerIntent
    from .passes import PassPlanner
    from .qos_slices import QosSlices
    from .quotas import QuotaBook
    from .runtime_record_updates import RuntimeRecordUpdater
    from .state import NodeState

Drifts = list[tuple[Drift, str]]  # the reconcile edge's drifts, each with how it was repaired
# What `handle` answers an event with: a typed NRI reply (nri/handlers.py: CreateContainer's `CreateReply`;
# Synchronize's, StopContainer's and UpdateContainer's `UpdatesReply`), a `Refusal` (a create or a resize), a
# `Park` (the reply comes later as a `Resolve`), AwaitPass's bool, the reconcile edge's probes (DriftCheck) and
# drifts (CpusetsRead), or None (every other event, and a parked StartContainer's).
Reply = CreateReply | UpdatesReply | Refusal | Park | bool | list[DriftProbe] | Drifts | None


class CoreContext(Protocol):
    """The node core as a rule or a book sees it (module doc)."""

    # the state, the settings and the books a rule consults: read, never rebound (the core owns them)
    node: NodeState
    settings: Settings
    passes: PassPlanner
    records: RuntimeRecordUpdater
    quotas: QuotaBook
    slices: QosSlices

    # -- what leaves the core ------------------------------------------------------------------------
    def emit(self, effect: Effect) -> None:
        """An effect of the event being handled (the one route out for effects)."""

    def count(self, counter: CounterName, *labels: str) -> None:
        """One more of a counter (a `Count` effect)."""

    def commit(self) -> None:
        """What every change ends with: publish, checkpoint, and a pass for the started cgroups."""

    def park_until_pass(self, generation: int, reply: Callable[[bool], Reply], what: str) -> Reply:
        """The reply once a pass begun at `generation` or later has written the cgroups (now, or parked)."""

    def resolve(self, token: int, reply: Reply) -> None:
        """The reply to a parked event."""

    def record(self, decision: Decision, intent: ContainerIntent, outcome: str) -> None:
        """A decision into the log."""

    def refuse(self, message: str, kind: str = "admission") -> Refusal:
        """A refusal of a create or a resize."""

    def repair_results(self, results: Sequence[WriteResult]) -> None:
        """A pass is over: the drift repairs it wrote are answered (repairs.after_pass)."""
