"""The priority of the edge's background threads (settled cgroup passes, checkpoint writes).

Nice 10, so on a busy node the runtime's own work for an event (runc, the shim) goes first.
"""

from __future__ import annotations

import contextlib
import os
import threading


def background_priority() -> None:
    """Run this thread at nice 10 (Linux: per-thread nice by tid)."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
