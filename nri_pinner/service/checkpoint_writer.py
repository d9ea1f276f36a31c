"""Checkpoint write-behind: replies never wait for the disk.

Handlers hand over an immutable snapshot (`submit`, microseconds); one writer thread turns the
newest snapshot into the checkpoint body and writes it with `checkpoint.write` (temp file, fsync,
rename, directory fsync). The thread lingers `LINGER_SECONDS` after the first change before it
writes, so an event's burst (create, start, stop of one pod) is one write, and the encoding and
fsync fall after the runtime's own work for the event rather than into it; snapshots that arrive
meanwhile (or while a write is in flight) are coalesced: only the newest is written next. A body
equal to the last one written is not written again. `flush` and `close` cut the linger short.

Crash guarantee (README "Checkpoint"): the file always holds a complete checkpoint of some
earlier moment — never a torn one — at most one write (about `LINGER_SECONDS` plus the write)
behind the state replies were based on.
That is enough because the checkpoint is a hint: Synchronize rebuilds state from the runtime and
the cgroups, and a container admitted after the last write is adopted from its cpuset there.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import structlog

from . import checkpoint
from .cgroup_passes import background_priority
from .checkpoint import Snapshot

log = structlog.get_logger("nri_pinner.service")

LINGER_SECONDS = 0.1


class CheckpointWriter:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.written = 0  # files written
        self.skipped = 0  # snapshots whose body equalled the last one written
        self.failed = 0
        self._cond = threading.Condition()
        self._pending: Snapshot | None = None
        self._submitted = self._done = 0  # sequence numbers: flush() waits for done >= submitted
        self._last: dict[str, Any] | None = None
        self._closed = True
        self._hurry = 0  # flush() callers waiting: no linger
        self._thread = threading.Thread()

    def submit(self, snapshot: Snapshot) -> None:
        with self._cond:
            self._pending = snapshot
            self._submitted += 1
            if self._closed:  # first use, or used again after close(): (re)start the thread
                self._closed = False
                self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything submitted so far is on disk (or skipped); False on timeout."""
        with self._cond:
            target = self._submitted
            self._hurry += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: self._done >= target, timeout)
            finally:
                self._hurry -= 1

    def close(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        background_priority()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                self._cond.wait_for(lambda: self._hurry > 0 or self._closed, LINGER_SECONDS)
                snapshot, seq, self._pending = self._pending, self._submitted, None
            self._write(snapshot)
            with self._cond:
                self._done = seq
                self._cond.notify_all()

    def _write(self, snapshot: Snapshot) -> None:
        try:
            body = snapshot.body()
            if body == self._last:
                self.skipped += 1
                return
            checkpoint.write(self.path, body)
            self._last = body
            self.written += 1
        except Exception as exc:  # the writer thread must survive any one write
            self.failed += 1
            log.error("checkpoint write failed", path=str(self.path), error=str(exc))
