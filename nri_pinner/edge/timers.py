"""Named timers for the core (`ArmTimer`): one daemon thread, fed through a queue, calls back when a
timer is due (the callback posts `TimerFired` to the node thread). Arming a name again replaces it."""

from __future__ import annotations

import heapq
import queue
import threading
import time
from collections.abc import Callable

Fire = Callable[[str], None]


class Timers:
    def __init__(self, fire: Fire) -> None:
        self.fire = fire
        self._requests: queue.SimpleQueue[tuple[str, float] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._started = False

    def arm(self, name: str, seconds: float) -> None:
        if not self._started:  # first use (the node thread is the only caller)
            self._started = True
            self._thread = threading.Thread(target=self._run, name="core-timers", daemon=True)
            self._thread.start()
        self._requests.put((name, time.monotonic() + max(seconds, 0.0)))

    def close(self, timeout: float = 2.0) -> None:
        if self._thread is not None:
            self._requests.put(None)
            self._thread.join(timeout)
            self._thread, self._started = None, False

    def _run(self) -> None:
        heap: list[tuple[float, int, str]] = []
        due_at: dict[str, tuple[float, int]] = {}  # name -> its newest arming (older heap entries are stale)
        seq = 0
        while True:
            now = time.monotonic()
            while heap and heap[0][0] <= now:
                at, n, name = heapq.heappop(heap)
                if due_at.get(name) == (at, n):
                    del due_at[name]
                    self.fire(name)
            try:
                request = self._requests.get(timeout=heap[0][0] - now if heap else None)
            except queue.Empty:
                continue
            if request is None:
                return
            name, at = request
            seq += 1
            due_at[name] = (at, seq)
            heapq.heappush(heap, (at, seq, name))
