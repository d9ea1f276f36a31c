"""Plugin-side request dispatch for the NRI stub: one runtime request in, one ttrpc reply out.

Holds what the runtime told us in Configure (name, version, NRI version, timeouts) and the
per-connection Synchronize chunk buffer. Handlers are found through their Protocols
(:mod:`nri_pinner.nri.handlers`), every call is budgeted and may be parked (see handlers.py), and
the response is built from the handler's typed reply (see replies.py); a reply of the wrong type
is answered with an error status.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field, fields
from typing import Any

from google.protobuf.message import DecodeError

from nri_pinner.nri import versions
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import PROTOCOLS, bound_handler
from nri_pinner.nri.stub.handler_calls import (
    ADJUSTING_EVENTS,
    STATE_EVENT_BY_RPC,
    STATE_EVENTS,
    HandlerThread,
    HandlerTimeout,
    call_with_budget,
    event_names,
    handled_events,
    state_handler,
)
from nri_pinner.nri.stub.replies import WrongReplyType, response, synchronize_updates
from nri_pinner.nri.stub.wire import INVALID_ARGUMENT, UNIMPLEMENTED, UNKNOWN, KvLogger, Reply

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
DEFAULT_REQUEST_TIMEOUT = 2.0  # pkg/api/timeouts.go; sent in ConfigureRequest only from NRI v0.8
DEFAULT_REGISTRATION_TIMEOUT = 5.0

_ADJUSTING_BY_RPC = {rpc: (name, req, resp) for name, rpc, req, resp in ADJUSTING_EVENTS.values()}


@dataclass
class StubStats:
    requests: int = 0
    fallbacks: int = 0
    late_replies: int = 0
    handler_errors: int = 0
    connections: int = 0
    registrations: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def bump(self, name: str) -> None:
        with self._lock:  # bumped from the wire loop and the handler thread
            setattr(self, name, getattr(self, name) + 1)

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}


class HandlerFailed(Exception):
    """A handler or fallback raised; the runtime gets an error status with this text."""


class Dispatcher:
    """Routes Plugin-service requests to the plugin object's handlers."""

    def __init__(
        self,
        plugin: object,
        plugin_name: str,
        logger: KvLogger,
        *,
        budget_margin: float,
        request_timeout: float,
        registration_timeout: float,
    ) -> None:
        self.plugin = plugin
        self.plugin_name = plugin_name
        self.handled_events = handled_events(plugin)
        if self.handled_events == 0:
            raise ValueError(f"plugin {type(plugin).__name__} implements no NRI event handler")
        self._log = logger
        self.budget_margin = budget_margin
        self.request_timeout = request_timeout
        self.registration_timeout = registration_timeout
        self.runtime_name = ""
        self.runtime_version = ""
        self.runtime_nri_version: versions.NriVersion | None = None
        self.runtime_nri_version_source = "unknown"
        self.events = 0
        self.stats = StubStats()
        self.handlers: HandlerThread | None = None
        self.synchronized = False
        self.configured = asyncio.Event()  # set by Configure; the stub's registration watchdog waits on it
        self._sync_pods: list[api.PodSandbox] = []
        self._sync_containers: list[api.Container] = []
        self._sync_deadline: float | None = None

    def new_connection(self) -> None:
        self.synchronized = False
        self.configured = asyncio.Event()
        self._sync_pods, self._sync_containers, self._sync_deadline = [], [], None

    def budget(self, timeout_ns: int = 0) -> float:
        """Time a handler may take: the runtime's timeout minus the safety margin."""
        timeout = self.request_timeout
        if timeout_ns > 0:
            timeout = min(timeout, timeout_ns / 1e9)
        budget = timeout - self.budget_margin
        return budget if budget > 0 else timeout / 2

    async def handle(self, service: str, method: str, payload: bytes, timeout_ns: int) -> Reply:
        deadline = asyncio.get_running_loop().time() + self.budget(timeout_ns)
        self.stats.bump("requests")
        if service != PLUGIN_SERVICE:
            return Reply(code=UNIMPLEMENTED, message=f"service {service} not served by NRI plugin")
        try:
            if method == "Configure":
                return await self._configure(api.ConfigureRequest.FromString(payload), deadline)
            if method == "Synchronize":
                return await self._synchronize(api.SynchronizeRequest.FromString(payload), deadline)
            if method == "StateChange":
                return await self._state_event(api.StateChangeEvent.FromString(payload), deadline)
            if method in STATE_EVENT_BY_RPC:  # NRI v0.12 dedicated RPC -> same handler as StateChange
                request = getattr(api, method + "Request").FromString(payload)
                change = api.StateChangeEvent(event=STATE_EVENT_BY_RPC[method], pod=request.pod)  # type: ignore[arg-type]
                if "container" in request.DESCRIPTOR.fields_by_name and request.HasField("container"):
                    change.container.CopyFrom(request.container)
                return await self._state_event(change, deadline)
            if method in _ADJUSTING_BY_RPC:
                return await self._adjusting(method, payload, deadline)
            if method == "Shutdown" and (shutdown := bound_handler(self.plugin, "shutdown")) is not None:
                await self._invoke("shutdown", shutdown, (), deadline)
                return Reply()
        except DecodeError as exc:
            return Reply(code=INVALID_ARGUMENT, message=f"cannot decode {method} request: {exc}")
        except HandlerFailed as exc:
            return Reply(code=UNKNOWN, message=str(exc))
        return self._unimplemented(method)

    def _unimplemented(self, method: str) -> Reply:
        message = f"method {method} not implemented by plugin {self.plugin_name}"
        return Reply(code=UNIMPLEMENTED, message=message)

    async def _invoke(self, label: str, fn: Any, args: tuple[Any, ...], deadline: float) -> tuple[bool, Any]:
        """(True, result), or (False, None) after a budget overrun; handler errors -> HandlerFailed."""
        assert self.handlers is not None
        plugin = self.plugin

        def on_late(outcome: Any) -> None:  # runs on the handler thread
            self.stats.bump("late_replies")
            self._log.warning("late handler result discarded", handler=label, outcome=type(outcome).__name__)
            hook = bound_handler(plugin, "discarded_reply")
            if hook is not None:
                try:
                    hook(label, args, outcome)
                except Exception as exc:
                    self._log.error("discarded_reply hook failed", error=repr(exc))

        budget = deadline - asyncio.get_running_loop().time()
        try:
            return True, await call_with_budget(self.handlers, fn, args, budget, on_late)
        except HandlerTimeout as exc:
            self.stats.bump("fallbacks")
            self._log.warning("handler overran its budget; answering with fallback", handler=label,
                              error=str(exc))
            return False, None
        except Exception as exc:
            self.stats.bump("handler_errors")
            if getattr(exc, "refusal", False):  # the plugin said no on purpose: a decision, not a fault
                self._log.info("handler refused the request", handler=label, reason=str(exc))
            else:
                self._log.error("handler failed", handler=label, error=repr(exc))
            raise HandlerFailed(f"{label}: {exc}") from exc

    def _fallback(self, label: str, args: tuple[Any, ...]) -> Any:
        name = "fallback_" + label
        # Typed fallbacks through their Protocol; the others (configure, state events, ...) by name.
        fallback = bound_handler(self.plugin, name) if name in PROTOCOLS else getattr(self.plugin, name, None)
        if fallback is None:
            return None
        try:
            return fallback(*args)
        except Exception as exc:
            self._log.warning("fallback raised; answering with an error status", handler=label,
                              error=repr(exc))
            raise HandlerFailed(f"{label}: {exc}") from exc

    async def _configure(self, req: api.ConfigureRequest, deadline: float) -> Reply:
        self.runtime_name, self.runtime_version = req.runtime_name, req.runtime_version
        self.runtime_nri_version, self.runtime_nri_version_source = versions.runtime_nri_version(
            req.NRI_version, req.runtime_name, req.runtime_version
        )
        if req.request_timeout > 0:
            self.request_timeout = req.request_timeout / 1000
        if req.registration_timeout > 0:
            self.registration_timeout = req.registration_timeout / 1000
        mask = self.handled_events
        if (configure := bound_handler(self.plugin, "configure")) is not None:
            on_time, result = await self._invoke("configure", configure, (req,), deadline)
            result = result if on_time else self._fallback("configure", (req,))
            if isinstance(result, int) and result:
                if result & ~self.handled_events:
                    self._log.warning("plugin asked for events it has no handler for; ignored",
                                      events=event_names(result & ~self.handled_events))
                mask = result & self.handled_events
        valid = versions.valid_events(self.runtime_nri_version)
        runtime_nri = versions.format_version(self.runtime_nri_version)
        if mask & ~valid:
            self._log.info("not subscribing to events this runtime does not know",
                           events=event_names(mask & ~valid), runtime_nri=runtime_nri)
        mask &= valid
        if mask == 0:  # 0 would mean "every event" to the runtime
            return Reply(code=UNKNOWN, message="plugin handles no event this runtime supports")
        self.events = mask
        self.configured.set()
        self._log.info("configured", plugin=self.plugin_name, runtime_name=req.runtime_name,
                       runtime_version=req.runtime_version, runtime_nri=runtime_nri,
                       source=self.runtime_nri_version_source, request_timeout_s=self.request_timeout,
                       events=event_names(mask))
        return Reply(api.ConfigureResponse(events=mask).SerializeToString())

    async def _synchronize(self, req: api.SynchronizeRequest, deadline: float) -> Reply:
        if self._sync_deadline is None:
            self._sync_deadline = deadline  # every chunk shares the first chunk's budget
        self._sync_pods.extend(req.pods)
        self._sync_containers.extend(req.containers)
        if req.more:
            return Reply(api.SynchronizeResponse(more=True).SerializeToString())
        pods, containers, deadline = self._sync_pods, self._sync_containers, self._sync_deadline
        self._sync_pods, self._sync_containers, self._sync_deadline = [], [], None
        result: object = None
        if (synchronize := bound_handler(self.plugin, "synchronize")) is not None:
            on_time, result = await self._invoke("synchronize", synchronize, (pods, containers), deadline)
            if not on_time:
                result = self._fallback("synchronize", (pods, containers))
        try:
            updates = synchronize_updates(result)
        except WrongReplyType:
            return self._wrong_type("synchronize", result, "UpdatesReply or a ContainerUpdate list")
        self.synchronized = True
        self._log.info("synchronized", plugin=self.plugin_name, pods=len(pods), containers=len(containers))
        return Reply(api.SynchronizeResponse(update=updates, more=False).SerializeToString())

    async def _state_event(self, event: api.StateChangeEvent, deadline: float) -> Reply:
        handler = state_handler(self.plugin, event.event)
        if handler is None:
            known = event.event in api.Event.values()
            return self._unimplemented(api.Event.Name(event.event) if known else f"event {event.event}")
        label = STATE_EVENTS[event.event][0] if event.event in STATE_EVENTS else "state_change"
        on_time, _ = await self._invoke(label, handler, (event,), deadline)
        if not on_time:
            self._fallback(label, (event,))
        return Reply()  # Empty and every v0.12 per-event response encode to no bytes

    async def _adjusting(self, method: str, payload: bytes, deadline: float) -> Reply:
        label, request_type, response_type = _ADJUSTING_BY_RPC[method]
        handler = bound_handler(self.plugin, label)
        if handler is None:
            return self._unimplemented(method)
        request = request_type.FromString(payload)
        on_time, result = await self._invoke(label, handler, (request,), deadline)
        if not on_time:
            result = self._fallback(label, (request,))
        try:
            message = response(result, response_type)
        except WrongReplyType:
            return self._wrong_type(label, result, response_type.__name__)
        return Reply(message.SerializeToString())

    def _wrong_type(self, label: str, result: object, expected: str) -> Reply:
        self._log.error("handler returned the wrong type", handler=label, got=type(result).__name__,
                        expected=expected)
        return Reply(code=UNKNOWN, message=f"{label} returned {type(result).__name__}")
