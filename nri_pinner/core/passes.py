"""Cgroup passes as the core sees them: when one is due, what it writes, what it wrote, and the replies
that wait for one (parked, never a blocked thread).

A change (`want`) asks for a pass after a settle: SETTLE_SECONDS, so the reply that caused it leaves
first and the pass overlaps containerd finishing the event, or WIDEN_SETTLE_SECONDS when the shared
pool only grew since the last pass (no shared container loses a CPU: never urgent). One pass is in
flight at a time; a reply that must wait for one (an exclusive container's start, a grown resize,
Synchronize) has it dispatched at once, as urgent, and is answered when it comes back, or at
`wait_seconds` with a warning (README "Pool changes"). The writes happen at the edge
(`edge/cgroups/passes.py`); their results come back as `CgroupsWritten`. A pass also takes the pod
cgroups whose CFS quota is due to be removed (core/quotas.py), written after its cpusets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from ..engine.cpuset import CPUSet
from .effects import ArmTimer, Expedite, Park, PassItem, WriteCgroups
from .events import CgroupsWritten
from .qos_slices import PROBE_PREFIX
from .state import Told

if TYPE_CHECKING:
    from .context import CoreContext, Reply

log = structlog.get_logger("nri_pinner.service")

SETTLE_SECONDS = 0.002  # the reply goes out first; the pass then overlaps containerd finishing the create
WIDEN_SETTLE_SECONDS = 0.1  # a pool that only grows is never urgent: let a stop or removal finish first
WAIT_SHARE = 0.5  # a start (or a grow) waits for the pass at most this share of the runtime's request timeout
SETTLE, SETTLE_WIDEN = "settle", "settle-widen"


def pass_wait_seconds(request_timeout_ms: int) -> float:
    """How long StartContainer (and a grown resize) waits for the pass: half the runtime's request
    timeout (1 s at containerd's default 2 s), so a slow node — or an emulated one, whose runtime is
    given a longer timeout — is not mistaken for a late pass, and the reply still makes it."""
    return WAIT_SHARE * (request_timeout_ms / 1000 if request_timeout_ms > 0 else 2.0)


def widens_only(cpus: CPUSet, known: Told | None) -> bool:
    """The write only adds CPUs to what the cgroup is known to hold. A pass writes these last, so a
    CPU moving between containers (a resize) leaves its old holder before its new one gets it."""
    return known is not None and known[0].issubset(cpus)


@dataclass
class _Waiter:
    token: int
    generation: int
    reply: Callable[[bool], Reply]
    what: str


@dataclass
class _InFlight:
    pass_id: int
    generation: int
    pool: CPUSet
    urgent: bool
    record: bool = False  # a runtime record update holds the slot (core/runtime_record_updates.py), not a pass
    writes: frozenset[str] = frozenset()  # what it writes (PassPlanner.overlapped)


class PassPlanner:
    def __init__(self, core: CoreContext) -> None:
        self.core = core
        self.wait_seconds = pass_wait_seconds(0)  # set from the runtime's request timeout at Configure
        self.wanted = 0  # the newest generation a pass was asked for
        self.done = 0  # the generation the last finished pass started from
        self.count = 0  # passes finished (with writes or not)
        self.in_flight: _InFlight | None = None
        # the settle timer armed now ("settle" or "settle-widen"), re-decided at each change as the pool
        # narrows or only widens; a pass dispatched for any reason voids it (a late fire is ignored)
        self.settle: str | None = None
        self.waiters: dict[int, _Waiter] = {}
        self.pool_written: CPUSet | None = None  # the shared pool the last pass wrote
        # what a pass (or a runtime record update) wrote, or may be writing, since the drift check's probe:
        # container ids and slice probe ids (qos_slices.PROBE_PREFIX); a read of one may be older or newer
        # than what the core knows of it, so the check leaves it to its next read (repairs.decide_repairs)
        self.overlapped: set[str] = set()
        # containers whose NRI update rode on a reply since the last probe: the runtime applies it in its own
        # time, so a read up to the next probe's may still show the set before it (seen in the VM guest: a
        # demoted container read 0.5 s after the reply that moved it)
        self.replied: set[str] = set()
        self._ids = 0

    def want(self, generation: int) -> None:
        self.wanted = max(self.wanted, generation)
        if self.in_flight is not None:
            return  # its result dispatches the next one
        if self.waiters:
            self.dispatch(urgent=True)
            return
        node = self.core.node
        widen = self.pool_written is not None and self.pool_written.issubset(node.shared_pool)
        kind = SETTLE_WIDEN if widen else SETTLE
        if self.settle is None or self.settle.partition("#")[0] != kind:
            # each settle timer has a name of its own: a fire already queued for one a pass voided must
            # not pass for the next (it dispatched a pass 1 ms into a 3600 s settle in a service test)
            self.settle = f"{kind}#{self.new_token()}"
            self.core.emit(ArmTimer(self.settle, WIDEN_SETTLE_SECONDS if widen else SETTLE_SECONDS))

    def lagging(self) -> None:
        """A started container's cgroup lags behind what it is to hold with no change since the last pass
        asked for (a container below a QoS slice: core/qos_slices.py): a new generation asks for one."""
        node = self.core.node
        if self.wanted >= node.generation:
            node.publish()
        self.want(node.generation)

    def new_token(self) -> int:
        self._ids += 1
        return self._ids

    def park(self, generation: int, reply: Callable[[bool], Reply], what: str) -> Reply:
        self.wanted = max(self.wanted, generation)  # a change that asked for no pass (a refusal's publish)
        flight = self.in_flight
        if self.done < generation and flight is None:
            self.dispatch(urgent=True)  # at once: a reply waits (with nothing to write, it is over here)
        elif self.done < generation and flight is not None and not flight.urgent:
            flight.urgent = True  # a background pass a reply now waits for: at normal priority
            if not flight.record:
                self.core.emit(Expedite(flight.pass_id))
        if self.done >= generation:
            return reply(False)
        token = self.new_token()
        self.waiters[token] = _Waiter(token, generation, reply, what)
        self.core.emit(ArmTimer(f"wait:{token}", self.wait_seconds))
        return Park(token)

    def timer(self, name: str) -> Reply:
        if name.startswith("wait:"):
            waiter = self.waiters.pop(int(name[5:]), None)
            if waiter is not None:
                if waiter.what in ("StartContainer", "UpdateContainer"):
                    self.core.count("late_replies", waiter.what)
                log.warning("shared cgroups not yet written when a reply waiting for them is due", reply=waiter.what,
                            waited_s=self.wait_seconds)
                self.core.resolve(waiter.token, waiter.reply(True))
            return None
        if name != self.settle:
            return None  # voided by a pass since, or replaced by the other settle
        self.settle = None
        if self.in_flight is None and self.wanted > self.done:
            self.dispatch(urgent=False)
        return None

    def dispatch(self, urgent: bool) -> None:
        """Start a pass from the current state: every started container whose cgroup lags."""
        self.settle = None
        node = self.core.node
        generation, pool = node.generation, node.shared_pool
        state, per_container = node.state, node.engine.memory is not None
        told = node.told
        # Every shared container wants the same (pool, mems) unless the Memory Manager gives it
        # nodes of its own: computed once per pass, not once per container.
        shared: Told | None = None
        work: list[PassItem] = []
        live: list[str] = []
        slices = self.core.slices  # the pool held on the QoS slices: their containers hold the wide set
        wide = slices.wide() if slices.enabled else pool
        below: dict[str, list[PassItem]] = {}
        for t in node.containers.values():
            if t.started and not t.stopped:
                live.append(t.cgroups_path)
                a = state.assignments.get(t.key)
                exclusive = a is not None and a.exclusive
                if per_container or exclusive:
                    cpus, mems = node.desired(t)
                else:
                    if shared is None:
                        shared = node.desired(t)
                    cpus, mems = shared
                known = told.get(t.container_id)
                unit = slices.slice_of(t, exclusive) if slices.enabled else None
                if unit is not None:  # the slice's step decides wide or pool (edge/cgroups/qos_slices.py)
                    below.setdefault(unit, []).append(PassItem(t.container_id, t.cgroups_path, wide, mems, known))
                elif known != (cpus, mems):
                    work.append(PassItem(t.container_id, t.cgroups_path, cpus, mems, known))
        quotas = self.core.quotas.due()
        held = slices.items(below, pool) if slices.enabled else ()
        if not work and not quotas and not held:  # nothing to write: this pass is over before it began
            self._finished(generation, pool)
            return
        # narrowing writes first, the shared pool's before the others (a resize: README "Resize")
        work.sort(key=lambda w: (widens_only(w.cpus, w.known), w.cpus != pool))
        pass_id = self.new_token()
        urgent = urgent or bool(self.waiters)
        writes = frozenset({w.container_id for w in work} | {PROBE_PREFIX + s.unit for s in held}
                           | {k.container_id for s in held for k in s.children})
        self.overlapped |= writes
        self.in_flight = _InFlight(pass_id, generation, pool, urgent, writes=writes)
        self.core.emit(WriteCgroups(pass_id, tuple(work), tuple(live), urgent, quotas, held))

    def written(self, event: CgroupsWritten) -> Reply:
        flight = self.in_flight
        if flight is None or flight.pass_id != event.pass_id:
            return None  # not ours (a pass of an earlier connection)
        node = self.core.node
        for r in event.results:
            t = node.containers.get(r.container_id)
            if t is None:
                continue
            if r.error:
                log.info("cgroup write failed; the next reply carries the NRI update", container=t.key[1],
                         error=r.error)
            elif r.untold:  # written, but systemd would put the old set back: runc tells it
                log.info("systemd scope not updated; the next reply carries the NRI update", container=t.key[1],
                         error=r.untold)
            if r.error or r.untold:
                node.told.pop(r.container_id, None)
                node.via_reply.add(r.container_id)
            else:  # what the cgroup holds now; a newer desired set is the next pass's
                node.told[r.container_id] = (r.cpus, r.mems)
        self.in_flight = None
        self.core.quotas.written(event.quotas)
        failed = self.core.slices.written(event.slices) or any(r.error or r.untold for r in event.results)
        self._finished(flight.generation, None if failed else flight.pool, event)
        if self.wanted > self.done:
            if self.waiters:
                self.dispatch(urgent=True)
            else:
                self.want(self.wanted)
        return None

    def _finished(self, generation: int, pool: CPUSet | None, event: CgroupsWritten | None = None) -> None:
        """A pass is over (``pool``: the shared pool it wrote, None when some writes failed)."""
        self.done = max(self.done, generation)
        self.pool_written = pool
        self.count += 1
        self.core.repair_results(event.results if event is not None else ())
        for token, waiter in list(self.waiters.items()):
            if waiter.generation <= self.done:
                del self.waiters[token]
                self.core.resolve(token, waiter.reply(False))

    def busy(self) -> bool:
        """A pass in flight, due, or waited for."""
        return self.in_flight is not None or self.wanted > self.done or bool(self.waiters) or self.settle is not None

    def hold(self, container_ids: frozenset[str] = frozenset()) -> int:
        """A runtime record update of `container_ids` takes the slot of a pass: no pass runs beside it (runc
        writes the cgroup with the set our reply named), and replies that wait for a pass wait for it too."""
        node = self.core.node
        pass_id = self.new_token()
        self.overlapped |= container_ids
        self.in_flight = _InFlight(pass_id, node.generation, node.shared_pool, urgent=False, record=True,
                                   writes=container_ids)
        return pass_id

    def replied_with(self, container_ids: set[str]) -> None:
        """A reply carries NRI updates of these containers: the drift check decides them again only on the
        read of the probe after next (at least one whole drift period after the reply)."""
        self.overlapped |= container_ids
        self.replied |= container_ids

    def probed(self) -> None:
        """A drift check probes now: from here on, only what a pass in flight writes or one begun since, and
        the containers a reply since the last probe updated."""
        self.overlapped = set(self.in_flight.writes) if self.in_flight is not None else set()
        self.overlapped |= self.replied
        self.replied = set()

    def released(self, pass_id: int, rewrite: bool) -> None:
        """The record update holding the slot is over; the pass it held back goes now (``rewrite``: a
        cgroup it may have left behind is rewritten even without a change)."""
        flight = self.in_flight
        if flight is None or flight.pass_id != pass_id or not flight.record:
            return
        self.in_flight = None
        if self.wanted > self.done or rewrite or self.waiters:
            self.dispatch(urgent=bool(self.waiters))

    def forget(self) -> None:
        """A connection ended: its parked replies are gone with it (a pass in flight still reports: the
        next pass must not write beside it)."""
        self.waiters.clear()
