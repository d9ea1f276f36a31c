"""Started containers' cpusets, written into their cgroups by one thread, off every reply.

The deadline that matters is not the CreateContainer reply but the new container's start: until
StartContainer returns, containerd has not started its process, so no shared container can run
beside it on its CPUs before then. So a handler only marks what changed and kicks this thread,
and the StartContainer handler waits (`wait`) until a pass that began after the create finished
(running it itself when no pass is running).
The pass starts 2 ms after the kick — once the reply is on the wire — and runs while containerd
finishes the create, so it is over before the start and no reply's cost grows with the number of
containers. (Waiting longer put the pass inside the start: measured README "Pool changes".)

Containers that have not started have no cgroup: their update goes in the reply (NRI), which
containerd applies to the spec runc will use. A started container whose write fails is left with
`applied_cpus = None`: the next event's reply carries the NRI update for it (counted in
`CpusetWriter.counts.failed`), and the repair timer checks it against its cgroup meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

import structlog

from ..engine.cpuset import CPUSet
from .cgroup_paths import CgroupError
from .cpuset_writer import CpusetWriter
from .tracker import Tracked, Tracker

log = structlog.get_logger("nri_pinner.service")

SETTLE_SECONDS = 0.002  # the reply goes out first; the pass then overlaps containerd finishing the create
WIDEN_SETTLE_SECONDS = 0.1  # a pool that only grows is never urgent: let a stop or removal finish first


WAIT_SHARE = 0.5  # a start (or a grow) waits for the pass at most this share of the runtime's request timeout


def pass_wait_seconds(request_timeout_ms: int) -> float:
    """How long StartContainer (and a grown resize) waits for the syncer's pass: half the runtime's
    request timeout (1 s at containerd's default 2 s), so a slow node — or an emulated one, whose
    runtime is given a longer timeout — is not mistaken for a late pass, and the reply still makes it."""
    return WAIT_SHARE * (request_timeout_ms / 1000 if request_timeout_ms > 0 else 2.0)


def background_priority() -> None:
    """Run this thread at nice 10: on a busy node the runtime's own work for the event (runc, the
    shim) goes first; the writes still finish long before the new container's start."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # Linux: per-thread nice by tid


def widens_only(cpus: CPUSet, known: tuple[CPUSet | None, str] | None) -> bool:
    """The write only adds CPUs to what the cgroup is known to hold. A pass writes these last, so a
    CPU moving between containers (a resize) leaves its old holder before its new one gets it."""
    return known is not None and known[0] is not None and known[0].issubset(cpus)


class CgroupSyncer:
    def __init__(self, tracker: Tracker, writer: CpusetWriter) -> None:
        self.tracker, self.writer = tracker, writer
        self.passes = 0
        self._cond = threading.Condition()
        self._wanted = 0  # the newest generation a pass was asked for
        self._done = 0  # the generation the last finished pass started from
        self._closed = True
        self._waiters = 0  # StartContainer handlers waiting: no settling
        self._pass_lock = threading.Lock()  # held for a whole pass, by the syncer or a waiting handler
        self._pool: CPUSet | None = None  # the shared pool the last pass wrote
        self._thread = threading.Thread()

    def kick(self, generation: int) -> None:
        """Ask for a pass that sees at least `generation` (cheap; call from a handler)."""
        with self._cond:
            self._wanted = max(self._wanted, generation)
            if self._closed:
                self._closed = False
                self._thread = threading.Thread(target=self._run, name="cgroup-sync", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait(self, generation: int, timeout: float) -> bool:
        """Block until a pass that started at or after `generation` has finished; False on timeout.

        When no pass is running the waiter runs it itself, on the handler thread at its normal
        priority: waking the nice-10 syncer on a busy node was most of a StartContainer's wait."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._done >= generation:
                return True
            self._waiters += 1
            self._cond.notify_all()
        try:
            if self._pass_lock.acquire(timeout=timeout):
                try:
                    with self._cond:
                        due = self._done < generation
                    if due:  # else the syncer's pass, which held the lock, already covered it
                        self._finish(self._safe_pass())
                finally:
                    self._pass_lock.release()
            with self._cond:
                return self._cond.wait_for(lambda: self._done >= generation,
                                           max(0.0, deadline - time.monotonic()))
        finally:
            with self._cond:
                self._waiters -= 1

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        background_priority()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._wanted > self._done or self._closed)
                if self._closed:
                    return
                self._settle()
                settled_for = self._wanted
            with self._pass_lock:  # one pass at a time: this thread's or a waiting handler's
                with self._cond:
                    due = self._wanted > self._done
                    # a kick that came while a waiting handler held the pass gets its own settling
                    stale = due and self._wanted != settled_for and not (self._waiters or self._closed)
                if due and not stale:
                    self._finish(self._safe_pass())

    def _safe_pass(self) -> int:
        try:
            return self.run_pass()
        except Exception as exc:  # the syncer (and a waiting handler) must survive anything one pass meets
            log.error("cgroup sync pass failed", error=repr(exc))
            with self.tracker.lock:
                return self.tracker.generation

    def _finish(self, generation: int) -> None:
        with self._cond:
            self._done = max(self._done, generation)
            self._cond.notify_all()

    def _settle(self) -> None:
        """Wait before a pass (with `_cond` held): SETTLE_SECONDS, so the reply that kicked us leaves
        before this pass competes for the CPUs (and the GIL), or WIDEN_SETTLE_SECONDS, so a stop or a
        removal finishes (its exit handling) first, while the shared pool only grew since
        the last pass (no shared container must lose a CPU: nothing can overlap an exclusive set).
        A waiting StartContainer ends it; a newer kick makes it decide again, from the same start."""
        began = time.monotonic()
        while not (self._waiters or self._closed):
            seen = self._wanted
            view, written = self.tracker.published, self._pool  # lock-free: a published view is immutable
            widen = view is not None and written is not None and written.issubset(view.shared_pool)
            left = began + (WIDEN_SETTLE_SECONDS if widen else SETTLE_SECONDS) - time.monotonic()
            if left <= 0 or not self._cond.wait_for(
                    lambda: self._waiters > 0 or self._closed or self._wanted != seen, left):  # noqa: B023
                return

    def run_pass(self) -> int:
        """Write every started container whose cgroup lags; returns the generation it started from."""
        tr = self.tracker
        with tr.lock:
            generation, pool = tr.generation, tr.shared_pool
            work = []
            # Every shared container wants the same (pool, mems) unless the Memory Manager gives it
            # nodes of its own: computed once per pass, not once per container.
            state, per_container = tr.state, tr.engine.memory is not None
            shared: tuple[CPUSet, str] | None = None
            live: list[str] = []
            for t in tr.containers.values():
                if t.started and not t.stopped:
                    live.append(t.cgroups_path)
                    a = state.assignments.get(t.key)
                    if per_container or (a is not None and a.exclusive):
                        cpus, mems = tr.desired(t)
                    else:
                        if shared is None:
                            shared = tr.desired(t)
                        cpus, mems = shared
                    if t.applied_cpus != cpus or t.applied_mems != mems:
                        known = (t.applied_cpus, t.applied_mems) if t.applied_cpus is not None else None
                        work.append((t, cpus, mems, known))
        if len(self.writer.files) > len(live):  # some went away: close their cgroup files
            self.writer.retain(live)
        done: list[tuple[Tracked, CPUSet, str, bool]] = []
        # narrowing writes first, the shared pool's before the others (a resize: README "Resize")
        work.sort(key=lambda w: (widens_only(w[1], w[3]), w[1] != pool))
        # systemd first (its scopes then hold the new sets, and it writes them itself), the direct
        # writes after: a re-application in between writes the new set, never a stale one
        untold = self.writer.tell_systemd((t.cgroups_path, cpus, mems) for t, cpus, mems, _ in work)
        for t, cpus, mems, known in work:
            try:
                self.writer.apply(t.cgroups_path, cpus, mems, known)
            except CgroupError as exc:
                log.info("cgroup write failed; the next reply carries the NRI update", container=t.key[1],
                         error=str(exc))
                done.append((t, cpus, mems, False))
                continue
            why = untold.get(t.cgroups_path)
            if why is not None:  # written, but systemd would put the old set back: runc tells it
                log.info("systemd scope not updated; the next reply carries the NRI update", container=t.key[1],
                         error=why)
            done.append((t, cpus, mems, why is None))
        with tr.lock:
            for t, cpus, mems, ok in done:
                if not ok:
                    t.applied_cpus, t.fallback = None, True
                elif tr.desired(t) == (cpus, mems):  # else a newer pass (already kicked) writes the newer set
                    t.applied_cpus, t.applied_mems = cpus, mems
        self._pool = pool
        self.passes += 1
        return generation
