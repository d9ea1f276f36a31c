"""The runtime's own record of each container's cpuset, brought in line with what its cgroup holds.

containerd keeps the cpuset of each container's create (its stored spec) and hands it to runc on every
later update; our pool changes go into the cgroups, not into that record. While we are up, every NRI
UpdateContainer is answered with the current set, so a stale record does no harm — but while we are
away (a rolling update of the DaemonSet, an upgrade of the package), a kubelet update of a shared
container makes runc write the create-time set back, exclusive CPUs included, until we return. So,
once the pool has been quiet for `reconcile.runtime_record_quiet_seconds`, the record of each started
container that disagrees is updated through the runtime, one container at a time, in the background.

Each such update is a runc call that writes the cgroup too, and the cpuset runc writes is the one our
reply to its UpdateContainer names — decided then, possibly before a change that narrows the pool
lands. So a record update runs as a cgroup pass does: alone (no pass while it is in flight, it waits
for none in flight), and a reply that waits for a pass (an exclusive container's start) also waits for
it to finish; the pass after it rewrites whatever it left behind. Which path: `edge/watch/reconcile.py`
(an NRI update where that is safe, else CRI UpdateContainerResources, the kubelet's own call)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from .effects import ArmTimer, RecordItem, UpdateRuntimeRecords
from .events import RuntimeRecordsUpdated, RuntimeRecordUpdatesReady

if TYPE_CHECKING:
    from .context import CoreContext, Reply

log = structlog.get_logger("nri_pinner.service")

TIMER = "records"
RETRY_TIMER = "records-retry"
GAP_SECONDS = 0.05  # between two record updates: the runtime's other calls go first
# After a failed update (its CRI call outlasted the pass wait that bounds it, say, on a slow node), the
# node may stay quiet for hours: the failed records are tried again after these delays, one more step
# per failure in a row (the last repeats), as well as after the next change.
RETRY_SECONDS = (10.0, 30.0, 60.0, 120.0, 300.0)


class RuntimeRecordUpdater:
    """When records are updated and which one is next (the record itself: `NodeState.recorded`)."""

    def __init__(self, core: CoreContext, quiet_seconds: float) -> None:
        self.core = core
        self.quiet = quiet_seconds  # 0: off
        self.ready = False  # the edge has a path to the runtime (`RuntimeRecordUpdatesReady`)
        self.armed_at: int | None = None  # the generation the timer was armed at (None: not armed)
        self.failed: dict[str, int] = {}  # container id -> generation its update failed at (not retried before)
        self.failures_in_a_row = 0  # picks the next retry delay; a success starts over
        self.retry_armed = False
        self.in_flight: dict[str, RecordItem] = {}
        self.count = 0  # record updates sent (status)

    # -- events ----------------------------------------------------------------------------------
    def became_ready(self, event: RuntimeRecordUpdatesReady) -> Reply:
        self.ready = event.ready and self.quiet > 0 and self.core.node.cgroup_writes
        self.changed()
        return None

    def changed(self) -> None:
        """After a commit: the pool must be quiet for a while before any record is touched."""
        if self.ready and self.armed_at is None:
            self.armed_at = self.core.node.generation
            self.core.emit(ArmTimer(TIMER, self.quiet))

    def timer(self) -> Reply:
        node, passes = self.core.node, self.core.passes
        armed_at, self.armed_at = self.armed_at, None
        if not self.ready or self.in_flight:
            return None
        if armed_at != node.generation or passes.busy():  # not quiet yet: look again a period later
            self.changed()
            return None
        item = self._next()
        if item is None:
            return None
        self.in_flight[item.container_id] = item
        self.core.emit(UpdateRuntimeRecords(passes.hold(frozenset({item.container_id})), (item,)))
        return None

    def synced(self, event: RuntimeRecordsUpdated) -> Reply:
        node = self.core.node
        rewrite = False
        for r in event.results:
            item = self.in_flight.pop(r.container_id, None)
            if item is None or r.container_id not in node.containers:
                continue
            if r.path:
                self.count += 1
                self.failures_in_a_row = 0
                if r.path == "nri":  # an unsolicited update never comes back as UpdateContainer: noted here
                    node.recorded[r.container_id] = node.told[r.container_id] = (item.cpus, item.mems)
            else:
                self.failed[r.container_id] = node.generation
                node.told.pop(r.container_id, None)  # runc may still write it, late: a pass rewrites it
                rewrite = True
                delay = self._arm_retry()
                log.info("runtime record not updated; retried after the next change or a delay",
                         container=item.name, error=r.error, retry_seconds=delay)
        self.in_flight.clear()
        self.core.passes.released(event.sync_id, rewrite)
        if self._next() is not None:
            self.armed_at = node.generation
            self.core.emit(ArmTimer(TIMER, GAP_SECONDS))
        return None

    def retry(self) -> Reply:
        """The retry delay is over: the failed records are candidates again, once the pool is quiet."""
        self.retry_armed = False
        self.failed.clear()
        self.changed()
        return None

    def _arm_retry(self) -> float:
        delay = RETRY_SECONDS[min(self.failures_in_a_row, len(RETRY_SECONDS) - 1)]
        self.failures_in_a_row += 1
        if not self.retry_armed:
            self.retry_armed = True
            self.core.emit(ArmTimer(RETRY_TIMER, delay))
        return delay

    def is_ours(self, container_id: str) -> bool:
        """The UpdateContainer of a record update we sent (its cpuset may be a change behind)."""
        return container_id in self.in_flight

    # -- which one ---------------------------------------------------------------------------------
    def _next(self) -> RecordItem | None:
        node, slices = self.core.node, self.core.slices
        for t in node.containers.values():
            cid = t.container_id
            if not t.started or t.stopped or not t.cgroups_path or cid in node.via_reply or slices.holds(t):
                continue
            desired = node.desired(t)
            if node.recorded.get(cid) == desired or self.failed.get(cid) == node.generation:
                continue
            return RecordItem(cid, t.key[1], *desired)
        return None

    def stale(self) -> int:
        """How many started containers' records disagree with their cgroups (status, tests)."""
        node, slices = self.core.node, self.core.slices
        return sum(1 for t in node.containers.values()
                   if t.started and not t.stopped and t.cgroups_path and not slices.holds(t)
                   and node.recorded.get(t.container_id) != node.desired(t))
