"""The plugin's side of the stub: typed replies, parked replies and one ``Protocol`` per NRI event.

As containerd/nri's ``pkg/stub`` declares an interface per event (``CreateContainerInterface``, …),
each handler the stub can call is a ``runtime_checkable`` Protocol here. A plugin implements the
ones it needs; the stub finds them with ``isinstance`` (the event mask it subscribes to follows from
them) and mypy checks the plugin's signatures against them (``class P(CreateContainerHandler): ...``
or ``handler: CreateContainerHandler = P()``).

Handlers answer with typed replies and the stub builds the NRI response from them
(:mod:`nri_pinner.nri.stub.replies`): :class:`CreateReply` for CreateContainer, :class:`UpdatesReply`
for Synchronize, UpdateContainer and StopContainer, each carrying :class:`CpusetUpdate` s. The raw
response protos are still accepted, for adjustments the typed replies do not carry.

A handler that cannot answer yet returns a :class:`ParkedReply` and resolves it later
from another call on the handler thread; the stub answers the runtime when it resolves, within the
same budget as any other reply (past it: the fallback, and the late value goes to ``discarded_reply``).

Handlers may also be ``async def`` (the stub awaits them on the handler thread); the Protocols
declare the synchronous form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from nri_pinner.nri.gen import api_pb2 as api

T = TypeVar("T")

# ----------------------------------------------------------------------------- typed replies


@dataclass(frozen=True)
class CpusetUpdate:
    """An NRI ``ContainerUpdate`` of a container's ``cpuset.cpus`` and ``cpuset.mems``.

    ``ignore_failure``: containerd logs a failed update and goes on (an update riding on another
    container's reply) instead of failing the request. ``cpu_quota``: ``linux.resources.cpu.quota``
    too (µs per period; -1 = no limit), None = leave the quota the runtime has (or the request
    carries: an UpdateContainer's own container keeps the kubelet's value).
    """

    container_id: str
    cpus: str
    mems: str
    ignore_failure: bool = False
    cpu_quota: int | None = None


@dataclass(frozen=True)
class CreateReply:
    """CreateContainer's answer: the new container's cpuset ("" = leave that field unadjusted), its CPU
    quota (None = leave the kubelet's; -1 = no CFS limit) and updates of other containers."""

    cpus: str = ""
    mems: str = ""
    updates: tuple[CpusetUpdate, ...] = ()
    cpu_quota: int | None = None


@dataclass(frozen=True)
class UpdatesReply:
    """Synchronize's, UpdateContainer's and StopContainer's answer: updates of containers."""

    updates: tuple[CpusetUpdate, ...] = ()


DoneCallback = Callable[[bool, object], None]


class ParkedReply(Generic[T]):
    """A reply a handler returns now and resolves later (a *parked* reply).

    One-shot: the first :meth:`resolve` or :meth:`fail` settles it; later ones are ignored.
    Not thread-safe by design: it is created, resolved and watched on the stub's handler thread
    (the plugin resolves it from a later call it submitted there); callbacks run on the thread that
    settles it, at once if it is already settled.
    """

    __slots__ = ("_callbacks", "_done", "_ok", "_outcome")

    def __init__(self) -> None:
        self._done = False
        self._ok = False
        self._outcome: object = None
        self._callbacks: list[DoneCallback] = []

    @property
    def done(self) -> bool:
        return self._done

    def resolve(self, value: T) -> None:
        """The reply is ``value`` (converted by the stub as if the handler had returned it)."""
        self._settle(True, value)

    def fail(self, exc: BaseException) -> None:
        """The handler failed with ``exc``: the stub answers as if it had raised it."""
        self._settle(False, exc)

    def add_done_callback(self, fn: DoneCallback) -> None:
        """``fn(ok, value_or_exception)`` once settled; called at once if already settled."""
        if self._done:
            fn(self._ok, self._outcome)
        else:
            self._callbacks.append(fn)

    def _settle(self, ok: bool, outcome: object) -> None:
        if self._done:
            return
        self._done, self._ok, self._outcome = True, ok, outcome
        callbacks, self._callbacks = self._callbacks, []
        error: BaseException | None = None
        for fn in callbacks:  # every callback runs even when one raises; the first error is raised
            try:
                fn(ok, outcome)
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error

    def __repr__(self) -> str:
        state = ("resolved" if self._ok else "failed") if self._done else "pending"
        return f"<ParkedReply {state}>"


# ----------------------------------------------------------------------------- request handlers


@runtime_checkable
class ConfigureHandler(Protocol):
    def configure(self, req: api.ConfigureRequest) -> int | None:
        """The event mask to subscribe to (a subset of the handled events), or None for all."""


@runtime_checkable
class SynchronizeHandler(Protocol):
    def synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> UpdatesReply | ParkedReply[UpdatesReply] | Sequence[api.ContainerUpdate] | None:
        """The runtime's whole state at (re)connect, every chunk gathered into one call."""


@runtime_checkable
class CreateContainerHandler(Protocol):
    def create_container(
        self, req: api.CreateContainerRequest
    ) -> CreateReply | ParkedReply[CreateReply] | api.CreateContainerResponse: ...


@runtime_checkable
class UpdateContainerHandler(Protocol):
    def update_container(
        self, req: api.UpdateContainerRequest
    ) -> UpdatesReply | ParkedReply[UpdatesReply] | api.UpdateContainerResponse: ...


@runtime_checkable
class StopContainerHandler(Protocol):
    def stop_container(
        self, req: api.StopContainerRequest
    ) -> UpdatesReply | ParkedReply[UpdatesReply] | api.StopContainerResponse: ...


@runtime_checkable
class UpdatePodSandboxHandler(Protocol):
    def update_pod_sandbox(self, req: api.UpdatePodSandboxRequest) -> api.UpdatePodSandboxResponse | None: ...


@runtime_checkable
class ValidateContainerAdjustmentHandler(Protocol):
    def validate_container_adjustment(
        self, req: api.ValidateContainerAdjustmentRequest
    ) -> api.ValidateContainerAdjustmentResponse | None: ...


# ----------------------------------------------------------------------------- state events
# Reached through StateChange or, from NRI v0.12, a dedicated RPC each; the reply carries nothing.


@runtime_checkable
class RunPodSandboxHandler(Protocol):
    def run_pod_sandbox(self, event: api.StateChangeEvent) -> ParkedReply[None] | None: ...


@runtime_checkable
class StopPodSandboxHandler(Protocol):
    def stop_pod_sandbox(self, event: api.StateChangeEvent) -> ParkedReply[None] | None: ...


@runtime_checkable
class RemovePodSandboxHandler(Protocol):
    def remove_pod_sandbox(self, event: api.StateChangeEvent) -> ParkedReply[None] | None: ...


@runtime_checkable
class PostCreateContainerHandler(Protocol):
    def post_create_container(self, event: api.StateChangeEvent) -> ParkedReply[None] | None: ...


@runtime_checkable
class StartContainerHandler(Protocol):
    def start_container(self, event: api.StateChangeEvent) -> ParkedReply[None] | None: ...


@runtime_checkable
class PostStartContainerHandler(Protocol):
    def post_start_container(self, event: api.StateChangeEvent) -> ParkedReply[None] | None: ...


@runtime_checkable
class PostUpdateContainerHandler(Protocol):
    def post_update_container(self, event: api.StateChangeEvent) -> ParkedReply[None] | None: ...


@runtime_checkable
class RemoveContainerHandler(Protocol):
    def remove_container(self, event: api.StateChangeEvent) -> ParkedReply[None] | None: ...


@runtime_checkable
class PostUpdatePodSandboxHandler(Protocol):
    def post_update_pod_sandbox(self, event: api.StateChangeEvent) -> ParkedReply[None] | None: ...


@runtime_checkable
class StateChangeHandler(Protocol):
    def state_change(self, event: api.StateChangeEvent) -> ParkedReply[None] | None:
        """Every state event without its own handler (the plugin subscribes to all of them)."""


# ----------------------------------------------------------------------------- fallbacks and hooks
# A fallback is sync and quick and runs on the stub's wire loop: the answer sent when its handler
# overruns the budget (without one: an empty response); raising sends an error status. Fallbacks of
# the other handlers (``fallback_<handler>``) are still looked up by name only.


@runtime_checkable
class CreateContainerFallback(Protocol):
    def fallback_create_container(
        self, req: api.CreateContainerRequest
    ) -> CreateReply | api.CreateContainerResponse: ...


@runtime_checkable
class UpdateContainerFallback(Protocol):
    def fallback_update_container(
        self, req: api.UpdateContainerRequest
    ) -> UpdatesReply | api.UpdateContainerResponse: ...


@runtime_checkable
class StopContainerFallback(Protocol):
    def fallback_stop_container(self, req: api.StopContainerRequest) -> UpdatesReply | api.StopContainerResponse: ...


@runtime_checkable
class SynchronizeFallback(Protocol):
    def fallback_synchronize(
        self, pods: list[api.PodSandbox], containers: list[api.Container]
    ) -> UpdatesReply | Sequence[api.ContainerUpdate] | None: ...


@runtime_checkable
class DiscardedReplyHook(Protocol):
    def discarded_reply(self, handler: str, args: tuple[Any, ...], outcome: object) -> None:
        """A reply (value or exception) that came after the stub answered with the fallback; runs
        on the handler thread. ``handler`` is the handler's name, ``args`` what it was called with."""


@runtime_checkable
class ConnectHook(Protocol):
    def on_connect(self) -> None:
        """A new runtime connection, before registering: reset per-connection state."""


@runtime_checkable
class CloseHook(Protocol):
    def on_close(self) -> None:
        """The runtime connection ended."""


@runtime_checkable
class ConnectionHooks(ConnectHook, CloseHook, Protocol):
    """Both connection hooks (each is also discovered on its own)."""


@runtime_checkable
class ShutdownHandler(Protocol):
    def shutdown(self) -> None:
        """The runtime is shutting down (Shutdown request)."""


# handler (method) name -> the Protocol declaring it; the stub's discovery goes through this.
PROTOCOLS: dict[str, type[Any]] = {
    "configure": ConfigureHandler,
    "synchronize": SynchronizeHandler,
    "create_container": CreateContainerHandler,
    "update_container": UpdateContainerHandler,
    "stop_container": StopContainerHandler,
    "update_pod_sandbox": UpdatePodSandboxHandler,
    "validate_container_adjustment": ValidateContainerAdjustmentHandler,
    "run_pod_sandbox": RunPodSandboxHandler,
    "stop_pod_sandbox": StopPodSandboxHandler,
    "remove_pod_sandbox": RemovePodSandboxHandler,
    "post_create_container": PostCreateContainerHandler,
    "start_container": StartContainerHandler,
    "post_start_container": PostStartContainerHandler,
    "post_update_container": PostUpdateContainerHandler,
    "remove_container": RemoveContainerHandler,
    "post_update_pod_sandbox": PostUpdatePodSandboxHandler,
    "state_change": StateChangeHandler,
    "fallback_create_container": CreateContainerFallback,
    "fallback_update_container": UpdateContainerFallback,
    "fallback_stop_container": StopContainerFallback,
    "fallback_synchronize": SynchronizeFallback,
    "discarded_reply": DiscardedReplyHook,
    "on_connect": ConnectHook,
    "on_close": CloseHook,
    "shutdown": ShutdownHandler,
}


def bound_handler(plugin: object, name: str) -> Callable[..., Any] | None:
    """``plugin``'s handler ``name`` if it implements that handler's Protocol (and the attribute is
    callable, as before the Protocols: ``name = None`` or a non-callable opts out), else None."""
    protocol = PROTOCOLS.get(name)
    if protocol is None or not isinstance(plugin, protocol):
        return None
    fn = getattr(plugin, name)
    return fn if callable(fn) else None
