"""Plugin handler discovery and budgeted execution for the NRI stub.

Handlers are found through the Protocols of :mod:`nri_pinner.nri.handlers` (``isinstance``), one
per event; the event mask follows from which ones the plugin implements (a generic ``state_change``
covers every state event without its own handler).

The runtime drops a plugin that misses its request timeout (the container then proceeds without the
plugin's adjustment), so every handler call gets a budget shorter than that timeout. Plugin code runs
on one dedicated *handler thread*, one call at a time; the wire loop only waits for the result.
A handler that blocks (CPU-bound work, fsync, ``time.sleep``) therefore cannot stop the wire loop
from answering in time with the plugin's declared fallback. The late result is discarded and
reported to the plugin (``discarded_reply``) so it can undo what it decided.

A handler may return a :class:`~nri_pinner.nri.handlers.ParkedReply`: the call ends
when it resolves, within the same budget, and the handler thread meanwhile runs other submitted
calls (the ones that will resolve it).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import queue
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import ParkedReply, bound_handler

# Events delivered through StateChange (or, from NRI v0.12, through a dedicated RPC each):
# event -> (plugin handler name, dedicated RPC name).
STATE_EVENTS: dict[int, tuple[str, str]] = {
    api.RUN_POD_SANDBOX: ("run_pod_sandbox", "RunPodSandbox"),
    api.STOP_POD_SANDBOX: ("stop_pod_sandbox", "StopPodSandbox"),
    api.REMOVE_POD_SANDBOX: ("remove_pod_sandbox", "RemovePodSandbox"),
    api.POST_CREATE_CONTAINER: ("post_create_container", "PostCreateContainer"),
    api.START_CONTAINER: ("start_container", "StartContainer"),
    api.POST_START_CONTAINER: ("post_start_container", "PostStartContainer"),
    api.POST_UPDATE_CONTAINER: ("post_update_container", "PostUpdateContainer"),
    api.REMOVE_CONTAINER: ("remove_container", "RemoveContainer"),
    api.POST_UPDATE_POD_SANDBOX: ("post_update_pod_sandbox", "PostUpdatePodSandbox"),
}
STATE_EVENT_BY_RPC: dict[str, int] = {rpc: event for event, (_, rpc) in STATE_EVENTS.items()}

# Events with their own request/response RPC: event -> (handler name, RPC, request type, response type).
ADJUSTING_EVENTS: dict[int, tuple[str, str, type[Any], type[Any]]] = {
    api.CREATE_CONTAINER: (
        "create_container", "CreateContainer", api.CreateContainerRequest, api.CreateContainerResponse,
    ),
    api.UPDATE_CONTAINER: (
        "update_container", "UpdateContainer", api.UpdateContainerRequest, api.UpdateContainerResponse,
    ),
    api.STOP_CONTAINER: (
        "stop_container", "StopContainer", api.StopContainerRequest, api.StopContainerResponse,
    ),
    api.UPDATE_POD_SANDBOX: (
        "update_pod_sandbox", "UpdatePodSandbox", api.UpdatePodSandboxRequest, api.UpdatePodSandboxResponse,
    ),
    api.VALIDATE_CONTAINER_ADJUSTMENT: (
        "validate_container_adjustment",
        "ValidateContainerAdjustment",
        api.ValidateContainerAdjustmentRequest,
        api.ValidateContainerAdjustmentResponse,
    ),
}

GENERIC_STATE_HANDLER = "state_change"


def event_bit(event: int) -> int:
    return 1 << (event - 1)


def implements(plugin: object, name: str) -> bool:
    """The plugin implements the Protocol of handler (or hook) ``name``."""
    return bound_handler(plugin, name) is not None


def handled_events(plugin: object) -> int:
    """Event mask for everything the plugin has a handler for."""
    mask = 0
    for event, (name, *_rest) in ADJUSTING_EVENTS.items():
        if implements(plugin, name):
            mask |= event_bit(event)
    generic = implements(plugin, GENERIC_STATE_HANDLER)
    for event, (name, _rpc) in STATE_EVENTS.items():
        if generic or implements(plugin, name):
            mask |= event_bit(event)
    return mask


def state_handler(plugin: object, event: int) -> Callable[..., Any] | None:
    """The plugin's handler for a state event: the specific one, else the generic ``state_change``."""
    names = STATE_EVENTS.get(event)
    handler = bound_handler(plugin, names[0]) if names is not None else None
    return handler or bound_handler(plugin, GENERIC_STATE_HANDLER)


def event_names(mask: int) -> list[str]:
    known = [event for event in api.Event.values() if 0 < event < api.LAST]
    return [api.Event.Name(event) for event in known if mask & event_bit(event)]


class HandlerThread:
    """A daemon thread where all plugin code executes, one call at a time (the runtime sends one
    event at a time anyway). Calls arrive through a queue: half the CPU of scheduling them on an
    event loop from another thread, on every event. An async handler runs to completion on the
    thread's own event loop (`complete`), so it may await (`Stub.update_containers`).

    Daemon, so a handler stuck forever cannot keep the process alive. A Stub creates and stops one
    per run, unless it is given one (``Stub(handler_thread=...)``): then its owner starts and stops
    it and may :meth:`submit` its own calls, which run between handler calls and while a reply is
    parked (that is how a :class:`ParkedReply` gets resolved), and :meth:`submit_idle` work that waits
    until no call has come for ``idle_after`` seconds.
    """

    def __init__(self, name: str = "nri-plugin-handlers", *, idle_after: float = 0.05) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._idle: collections.deque[Callable[[], None]] = collections.deque()  # touched on the thread only
        self._idle_after = idle_after
        self._loop = asyncio.new_event_loop()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        while True:
            if self._idle:
                try:
                    call = self._calls.get(timeout=self._idle_after)
                except queue.Empty:  # quiet for a while: one piece of idle work, then look again
                    self._idle.popleft()()
                    continue
            else:
                call = self._calls.get()
            if call is None:
                break
            call()
        self._loop.close()

    @property
    def ident(self) -> int | None:
        """The thread's identifier (``threading.get_ident()`` inside it)."""
        return self._thread.ident

    def submit(self, call: Callable[[], None]) -> None:
        """Run ``call()`` on the handler thread; it must deliver its own outcome and not raise."""
        self._calls.put(call)

    def submit_idle(self, call: Callable[[], None]) -> None:
        """Run ``call()`` on the handler thread once no call has arrived there for ``idle_after`` seconds
        (so never while a reply is on its way out, nor before queued calls). One idle call at a time,
        oldest first; it must not raise. Dropped if the thread stops first."""
        if threading.get_ident() == self._thread.ident:
            self._idle.append(call)
        else:  # the idle list is the thread's own
            self._calls.put(lambda: self._idle.append(call))

    def complete(self, awaitable: Awaitable[Any]) -> Any:
        """Await on the handler thread's loop (only from a call running on that thread)."""
        return self._loop.run_until_complete(awaitable)

    def stop(self, timeout: float = 1.0) -> None:
        if not self._stopped:
            self._stopped = True
            self._calls.put(None)
        self._thread.join(timeout)


@dataclass
class _Invocation:
    """Decides, under a lock, whether a handler finished in time or was abandoned for a fallback."""

    lock: threading.Lock
    finished: bool = False
    abandoned: bool = False

    def finish(self) -> bool:
        """Called by the handler thread; False means the stub already answered without us."""
        with self.lock:
            self.finished = not self.abandoned
            return self.finished

    def abandon(self) -> bool:
        """Called by the wire loop at the deadline; False means the handler just finished."""
        with self.lock:
            self.abandoned = not self.finished
            return self.abandoned


class HandlerTimeout(Exception):
    """The handler overran its budget; the stub answers with the fallback."""


LateCallback = Callable[[Any], None]


async def call_with_budget(
    thread: HandlerThread,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    budget: float,
    on_late: LateCallback,
) -> Any:
    """Result of ``fn(*args)`` on the handler thread, or HandlerTimeout after ``budget`` seconds.

    Exceptions of ``fn`` propagate. When ``fn`` (or the coroutine it returned) gives a
    :class:`ParkedReply`, the result is what it resolves to (``fail`` propagates as an exception);
    the handler thread is free meanwhile. A result (or exception) arriving after the deadline is
    passed to ``on_late`` on the handler thread and never reaches the wire.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[Any] = loop.create_future()
    invocation = _Invocation(threading.Lock())

    def settle(ok: bool, outcome: Any) -> None:  # on the wire loop
        if not waiter.done():
            if ok:
                waiter.set_result(outcome)
            else:
                waiter.set_exception(outcome)

    def deliver(ok: bool, outcome: Any) -> None:  # on the handler thread
        if not invocation.finish():
            on_late(outcome)
            return
        with contextlib.suppress(RuntimeError):  # the wire loop closed meanwhile (shutdown)
            loop.call_soon_threadsafe(settle, ok, outcome)

    def guarded() -> None:  # on the handler thread
        try:
            outcome = fn(*args)
            if inspect.isawaitable(outcome):
                outcome = thread.complete(outcome)
        except BaseException as exc:  # delivered to the waiter: nothing may escape this thread
            deliver(False, exc)
            return
        if isinstance(outcome, ParkedReply):
            outcome.add_done_callback(deliver)  # parked: the thread goes on with other calls
        else:
            deliver(True, outcome)

    def expire() -> None:  # on the wire loop
        if invocation.abandon():
            # The handler keeps running on its thread; nothing cancels it (it may hold plugin state).
            settle(False, HandlerTimeout(f"handler exceeded its {budget:.3f}s budget"))

    thread.submit(guarded)
    timer = loop.call_later(max(budget, 0.0), expire)
    try:
        return await waiter
    finally:
        timer.cancel()
