"""The cgroup passes the core asks for (`WriteCgroups`), carried out off the node thread.

The deadline that matters is not the CreateContainer reply but the new container's start: until
StartContainer returns, containerd has not started its process, so no shared container can run
beside it on its CPUs before then. So the core only marks what changed and asks for a pass, and an
exclusive container's StartContainer reply is parked until a pass that began after the create has
finished (core/passes.py). A pass starts 2 ms after the change — once the reply is on the wire — and
runs while containerd finishes the create, so it is over before the start and no reply's cost grows
with the number of containers (measured: README "Pool changes").

Two threads, never writing at once (the core has one pass in flight): a background one at nice 10
for settled passes, so on a busy node the runtime's own work for the event (runc, the shim) goes
first, and one at normal priority for a pass a reply waits for (waking a nice-10 thread on a busy
node was most of a StartContainer's wait). Each pass tells systemd first (its scopes then hold the
new sets, and a re-application in between writes the new set, never a stale one), then writes — with
`reconcile.systemd_pool_on_qos_slices`, between the QoS slices' narrowing and widening steps
(qos_slices.py); its results go back to the core as `CgroupsWritten` on the node thread's queue. A container whose write
fails is left to the next reply's NRI update (counted in `CpusetWriter.counts.failed`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import structlog

from ...config import ReconcileSettings
from ...core.effects import WriteCgroups
from ...core.events import CgroupsWritten, PodQuotaResult, SliceResult, WriteResult
from ..thread_priority import background_priority
from .cpuset_writer import CpusetWriter, unwritable
from .paths import CgroupError
from .qos_slices import SlicePass, qos_slices_apply
from .quota_writer import PodQuotas
from .systemd_units import SystemdUnits

log = structlog.get_logger("nri_pinner.service")


def cgroup_writer(rec: ReconcileSettings) -> tuple[CpusetWriter | None, tuple[str, ...] | None]:
    """The writer the settings ask for (None: cgroup writes off, asked or found: a read-only tree), and the
    QoS slices that hold the shared pool (None: not held there; qos_slices.py)."""
    units = SystemdUnits(rec.systemd_bus, rec.systemd_timeout_seconds) if rec.systemd_bus else None
    writer = CpusetWriter(rec.cgroup_root, rec.cgroup_v1_skip_rebuilds, units) if rec.cgroup_writes else None
    why = unwritable(rec.cgroup_root) if writer is not None else ""
    if why:
        log.warning("cgroup writes off: pool changes travel as NRI updates in the replies", reason=why)
        writer = None
    return writer, qos_slices_apply(rec.systemd_pool_on_qos_slices, writer)


def failed_pass(work: WriteCgroups, why: str) -> tuple[list[WriteResult], list[SliceResult]]:
    """A pass that raised: every container in it failed (its NRI update rides on the next reply, with the
    pool for those below a QoS slice), every slice unconfirmed."""
    results = [WriteResult(i.container_id, i.cpus, i.mems, error=why) for i in work.items]
    for s in work.slices:
        results += [WriteResult(k.container_id, s.cpus, k.mems, error=why) for k in s.children]
    return results, [SliceResult(s.unit, s.cpus, error=why) for s in work.slices]


class PassWorkers:
    """Carries out `WriteCgroups` effects; `report` delivers each pass's results to the node thread."""

    def __init__(self, writer: CpusetWriter, report: Callable[[CgroupsWritten], None]) -> None:
        self.writer, self.report = writer, report
        self.quotas = PodQuotas(writer.root, writer.units, writer.counts)  # pods' cgroups without a CFS quota
        self.passes = 0
        # passes sent and not yet begun: the thread that pops one runs it (dict.pop is atomic), so an
        # expedited pass runs once, on whichever thread gets to it first
        self._unclaimed: dict[int, WriteCgroups] = {}
        self._queues: dict[bool, queue.SimpleQueue[WriteCgroups | None]] = {}
        self._threads: list[threading.Thread] = []
        for urgent in (False, True):
            q = self._queues[urgent] = queue.SimpleQueue()
            name = "cgroup-pass-urgent" if urgent else "cgroup-pass"
            thread = threading.Thread(target=self._run, args=(q, urgent), name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def submit(self, work: WriteCgroups) -> None:
        self._unclaimed[work.pass_id] = work
        self._queues[work.urgent].put(work)

    def expedite(self, pass_id: int) -> None:
        work = self._unclaimed.get(pass_id)
        if work is not None:
            self._queues[True].put(work)

    def close(self, timeout: float = 5.0) -> None:
        for q in self._queues.values():
            q.put(None)
        for thread in self._threads:
            thread.join(timeout)

    def _run(self, q: queue.SimpleQueue[WriteCgroups | None], urgent: bool) -> None:
        if not urgent:
            background_priority()
        while (work := q.get()) is not None:
            if self._unclaimed.pop(work.pass_id, None) is None:
                continue  # expedited: the other thread ran it
            try:
                results, slices = self.run(work)
            except Exception as exc:  # the pass must report whatever it meets, or the core waits forever
                log.error("cgroup pass failed", error=repr(exc))
                results, slices = failed_pass(work, repr(exc))
                self.writer.counts.failed += len(results)  # each rides on the next reply as an NRI update
            self.report(CgroupsWritten(work.pass_id, results, self.run_quotas(work), slices))

    def run_quotas(self, work: WriteCgroups) -> list[PodQuotaResult]:
        """The pass's pod cgroups without a CFS quota (or with theirs back), after its cpusets (no cpuset
        waits for them)."""
        try:
            return self.quotas.write(work.quotas) if work.quotas else []
        except Exception as exc:  # reported like the cpusets' faults: the core retries at its next check
            log.error("pod quota writes failed", error=repr(exc))
            return [PodQuotaResult(q.pod_key, q.name, error=repr(exc), quota=q.quota) for q in work.quotas]

    def run(self, work: WriteCgroups) -> tuple[list[WriteResult], list[SliceResult]]:
        """One pass's cpusets, in the order given (narrowing first), between the QoS slices' narrowing and
        widening steps (qos_slices.py); returns each container's and each slice's result. The pods'
        quotas (`work.quotas`) follow them (`run_quotas`)."""
        writer = self.writer
        if len(writer.files) > len(work.live):  # some went away: close their cgroup files
            writer.retain(work.live)
        held = SlicePass(writer, work.slices)
        untold = writer.tell_systemd(((i.cgroups_path, i.cpus, i.mems) for i in work.items),
                                     slices=held.narrowing_calls())
        held.narrow(untold)
        results = []
        for i in work.items:
            try:
                writer.apply(i.cgroups_path, i.cpus, i.mems, i.known)
            except CgroupError as exc:
                results.append(WriteResult(i.container_id, i.cpus, i.mems, error=str(exc)))
                continue
            results.append(WriteResult(i.container_id, i.cpus, i.mems, untold=untold.get(i.cgroups_path, "")))
        below, slices = held.finish()
        self.passes += 1
        return results + below, slices
