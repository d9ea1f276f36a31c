"""Checkpoint write-behind: replies never wait for the disk.

Handlers hand over an immutable snapshot (`submit`, microseconds); one writer thread turns the
newest snapshot into the checkpoint body and writes it with `checkpoint_file.write` (temp file, fsync,
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

import queue
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from ...core.checkpoint import Snapshot
from ..thread_priority import background_priority
from . import file as checkpoint_file

log = structlog.get_logger("nri_pinner.service")

LINGER_SECONDS = 0.1


class CheckpointWriter:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.written = 0  # files written
        self.skipped = 0  # snapshots whose body equalled the last one written
        self.failed = 0
        self._last: dict[str, Any] | None = None
        # snapshots, flush requests (an Event set once everything before it is on disk) and None (stop),
        # in order: the thread alone keeps what is pending
        self._queue: queue.SimpleQueue[Snapshot | threading.Event | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, snapshot: Snapshot) -> None:
        """Hand over a snapshot (microseconds; the node thread's only call)."""
        if self._thread is None or not self._thread.is_alive():  # first use, or used again after close()
            self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
            self._thread.start()
        self._queue.put(snapshot)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything submitted so far is on disk (or skipped); False on timeout."""
        if self._thread is None or not self._thread.is_alive():
            return True
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(timeout)

    def _run(self) -> None:
        background_priority()
        pending: Snapshot | None = None
        deadline = 0.0
        while True:
            try:
                left = deadline - time.monotonic()
                if pending is not None and left <= 0:
                    raise queue.Empty
                item = self._queue.get(timeout=left if pending is not None else None)
            except queue.Empty:  # lingered long enough: write the newest
                self._write(pending)  # type: ignore[arg-type]
                pending = None
                continue
            if isinstance(item, Snapshot):
                if pending is None:
                    deadline = time.monotonic() + LINGER_SECONDS
                pending = item  # coalesced: only the newest is written
                continue
            if pending is not None:  # a flush or the stop cuts the linger short
                self._write(pending)
                pending = None
            if item is None:
                return
            item.set()

    def _write(self, snapshot: Snapshot) -> None:
        try:
            body = snapshot.body()
            if body == self._last:
                self.skipped += 1
                return
            checkpoint_file.write(self.path, body)
            self._last = body
            self.written += 1
        except Exception as exc:  # the writer thread must survive any one write
            self.failed += 1
            log.error("checkpoint write failed", path=str(self.path), error=str(exc))
