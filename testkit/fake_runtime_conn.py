"""TEST DOUBLE: one plugin connection as the fake NRI runtime sees it (see fake_runtime.py).

Mirrors containerd/nri ``pkg/adaptation/plugin.go``: registration wait, Configure with the event-mask
check, (chunked) Synchronize under one request timeout, event relays under the request timeout
where a late or missing reply closes the plugin, and the Runtime service (RegisterPlugin,
UpdateContainers) served on conn 2.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from google.protobuf.message import Message

from nri_pinner.nri import codec
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub.dispatch import PLUGIN_SERVICE, RUNTIME_SERVICE
from nri_pinner.nri.stub.handler_calls import STATE_EVENTS, event_bit
from nri_pinner.nri.stub.wire import (
    UNIMPLEMENTED,
    UNKNOWN,
    KvLogger,
    PeerClosedError,
    Reply,
    TtrpcPeer,
    TtrpcStatusError,
)

M = TypeVar("M", bound=Message)

_MIN_OBJS_PER_SYNC_MSG = 8  # recalcObjsPerSyncMsg in NRI v0.8


@dataclass(frozen=True)
class RuntimeProfile:
    """What distinguishes the NRI versions a runtime may speak (see versions.py for sources)."""

    label: str
    runtime_name: str
    runtime_version: str
    nri_version: str  # sent in ConfigureRequest.NRI_version; "" before v0.12
    sends_timeouts: bool  # ConfigureRequest.registration_timeout/request_timeout, v0.8+
    valid_events: int  # 0x7FF before v0.10, 0x3FFF after
    chunked_sync: bool  # v0.8+: split Synchronize on ResourceExhausted, with `more`
    per_event_rpcs: bool  # v0.12: dedicated RPC per event, StateChange on Unimplemented
    max_send: int  # largest ttrpc body the runtime's client sends


class PluginDropped(Exception):
    """The runtime closed the plugin (timeout, closed socket, protocol violation)."""


class PluginConnection:
    """Runtime-side view of one connected plugin."""

    def __init__(self, runtime: Any, number: int) -> None:
        self.runtime = runtime
        self.profile: RuntimeProfile = runtime.profile
        self.label = f"plugin#{number}"
        self.name = ""
        self.idx = ""
        self.plugin_nri_version = ""
        self.events = 0
        self.configure_request: api.ConfigureRequest | None = None
        self.sync_requests: list[api.SynchronizeRequest] = []
        self.sync_replies: list[api.SynchronizeResponse] = []
        self.sync_updates: list[api.ContainerUpdate] = []
        self.updates: list[api.UpdateContainersRequest] = []
        self.forbidden_updates: list[api.UpdateContainersRequest] = []
        self.calls: list[str] = []  # every Plugin-service method sent, in order
        self.error: str | None = None
        self.ready = asyncio.Event()
        self.registered = asyncio.Event()
        self._log: KvLogger = runtime.log
        self.peer: TtrpcPeer | None = None

    @property
    def closed(self) -> bool:
        return self.peer is None or self.peer.closed

    @property
    def close_reason(self) -> str | None:
        return None if self.peer is None else self.peer.close_reason

    def close(self, reason: str) -> None:
        if self.error is None:
            self.error = reason
        if self.peer is not None:
            self.peer.close(reason, level=logging.WARNING)

    async def wait_closed(self, timeout: float = 5.0) -> None:
        assert self.peer is not None
        async with asyncio.timeout(timeout):
            await self.peer.wait_closed()

    # ----------------------------------------------------------------------------- Runtime service

    async def serve(self, service: str, method: str, payload: bytes, timeout_ns: int) -> Reply:
        if service != RUNTIME_SERVICE:
            return Reply(code=UNIMPLEMENTED, message=f"service {service}")
        if method == "RegisterPlugin":
            return self._register(api.RegisterPluginRequest.FromString(payload))
        if method == "UpdateContainers":
            return self._update_containers(api.UpdateContainersRequest.FromString(payload))
        return Reply(code=UNIMPLEMENTED, message=f"method {method}")

    def _register(self, req: api.RegisterPluginRequest) -> Reply:
        if self.registered.is_set():
            return Reply(code=UNKNOWN, message="plugin already registered")
        if not req.plugin_name or not re.fullmatch(r"[0-9]{2}", req.plugin_idx):
            bad = f"{req.plugin_name!r}/{req.plugin_idx!r}"
            return Reply(code=UNKNOWN, message=f"invalid plugin name/index {bad}")
        self.name, self.idx, self.plugin_nri_version = req.plugin_name, req.plugin_idx, req.NRI_version
        self.label = f"{req.plugin_idx}-{req.plugin_name}"
        self.registered.set()
        return Reply(api.Empty().SerializeToString())

    def _update_containers(self, req: api.UpdateContainersRequest) -> Reply:
        if self.runtime.forbid_unsolicited_updates:
            self.forbidden_updates.append(req)
            self._log.error("FORBIDDEN unsolicited UpdateContainers: this runtime's NRI can deadlock",
                            plugin=self.label, nri=self.profile.nri_version or self.profile.label)
            return Reply(code=UNKNOWN, message="unsolicited UpdateContainers forbidden by the fake runtime")
        self.updates.append(req)
        for u in req.update:  # containerd fails the whole call when one container cannot be updated
            if u.container_id in self.runtime.erroring_update_ids:
                return Reply(code=UNKNOWN, message=f"failed to update container {u.container_id}: not found")
        failed = [u for u in req.update if u.container_id in self.runtime.failing_update_ids]
        return Reply(api.UpdateContainersResponse(failed=failed).SerializeToString())

    # ----------------------------------------------------------------------------- handshake

    async def handshake(self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]) -> None:
        """Registration wait, Configure, Synchronize; sets ``ready`` or ``error`` (and closes)."""
        assert self.peer is not None
        try:
            async with asyncio.timeout(self.runtime.registration_timeout):
                closed = asyncio.ensure_future(self.peer.wait_closed())
                registered = asyncio.ensure_future(self.registered.wait())
                try:
                    await asyncio.wait({closed, registered}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    closed.cancel()
                    registered.cancel()
            if not self.registered.is_set():
                raise PluginDropped(f"connection closed before registration: {self.close_reason}")
            await self._configure()
            if self.runtime.synchronize:
                await self._synchronize(list(pods), list(containers))
            self.ready.set()
        except TimeoutError:
            self.close("timed out waiting for plugin registration")
        except (PluginDropped, TtrpcStatusError, PeerClosedError, codec.ProtocolError) as exc:
            self.close(f"handshake failed: {exc}")

    async def _configure(self) -> None:
        profile, runtime = self.profile, self.runtime
        req = api.ConfigureRequest(config=runtime.config, runtime_name=profile.runtime_name,
                                   runtime_version=profile.runtime_version, NRI_version=profile.nri_version)
        if profile.sends_timeouts:
            req.registration_timeout = round(runtime.registration_timeout * 1000)
            req.request_timeout = round(runtime.request_timeout * 1000)
        self.configure_request = req
        reply = await self.call("Configure", req, api.ConfigureResponse)
        events = reply.events
        if events & ~profile.valid_events:
            raise PluginDropped(f"invalid plugin events: 0x{events & ~profile.valid_events:x}")
        self.events = events or profile.valid_events  # 0 subscribes to everything

    async def _synchronize(self, pods: list[api.PodSandbox], containers: list[api.Container]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.runtime.request_timeout  # one budget for every chunk
        forced = self.runtime.sync_chunk
        pods_per, ctrs_per = forced if forced and self.profile.chunked_sync else (len(pods), len(containers))
        while True:
            pods_per, ctrs_per = min(pods_per, len(pods)), min(ctrs_per, len(containers))
            more = len(pods) > pods_per or len(containers) > ctrs_per
            req = api.SynchronizeRequest(pods=pods[:pods_per], containers=containers[:ctrs_per], more=more)
            size = len(codec.encode_request(PLUGIN_SERVICE, "Synchronize", req.SerializeToString(), 1 << 62))
            if size > self.profile.max_send:  # the Go client refuses locally: ResourceExhausted
                if not self.profile.chunked_sync or pods_per + ctrs_per <= _MIN_OBJS_PER_SYNC_MSG:
                    raise PluginDropped(f"synchronize message of {size} bytes too large")
                factor = min(self.profile.max_send / size, 0.9)
                pods_per, ctrs_per = int(pods_per * factor), int(ctrs_per * factor)
                if pods_per + ctrs_per < _MIN_OBJS_PER_SYNC_MSG:
                    pods_per = ctrs_per = _MIN_OBJS_PER_SYNC_MSG // 2
                continue
            self.sync_requests.append(req)
            reply = await self.call("Synchronize", req, api.SynchronizeResponse, deadline - loop.time())
            self.sync_replies.append(reply)
            if not more:
                self.sync_updates = list(reply.update)
                return
            if reply.update or reply.more != more:
                raise PluginDropped("plugin does not handle split sync requests")
            pods, containers = pods[pods_per:], containers[ctrs_per:]

    # ----------------------------------------------------------------------------- relays

    async def call(
        self, method: str, message: Message, response_type: type[M], timeout: float | None = None
    ) -> M:
        """Raw Plugin-service call. A late or missing reply closes the plugin, like the runtime."""
        if self.peer is None or self.peer.closed:
            raise PluginDropped(f"plugin closed: {self.close_reason}")
        timeout = self.runtime.request_timeout if timeout is None else timeout
        self.calls.append(method)
        try:
            payload = message.SerializeToString()
            body = await self.peer.call(PLUGIN_SERVICE, method, payload, max(timeout, 0.0))
        except TimeoutError:
            self.close(f"{method}: context deadline exceeded")
            raise PluginDropped(f"{method}: plugin missed the {timeout:.3f}s request timeout") from None
        except PeerClosedError as exc:
            raise PluginDropped(f"{method}: {exc}") from None
        return response_type.FromString(body)

    def subscribed(self, event: int) -> bool:
        return bool(self.events & event_bit(event))

    async def create_container(self, req: api.CreateContainerRequest) -> api.CreateContainerResponse | None:
        if not self.subscribed(api.CREATE_CONTAINER):
            return None
        return await self.call("CreateContainer", req, api.CreateContainerResponse)

    async def update_container(self, req: api.UpdateContainerRequest) -> api.UpdateContainerResponse | None:
        if not self.subscribed(api.UPDATE_CONTAINER):
            return None
        return await self.call("UpdateContainer", req, api.UpdateContainerResponse)

    async def stop_container(self, req: api.StopContainerRequest) -> api.StopContainerResponse | None:
        if not self.subscribed(api.STOP_CONTAINER):
            return None
        return await self.call("StopContainer", req, api.StopContainerResponse)

    async def update_pod_sandbox(
        self, req: api.UpdatePodSandboxRequest
    ) -> api.UpdatePodSandboxResponse | None:
        bit = event_bit(api.UPDATE_POD_SANDBOX)
        if not self.profile.valid_events & bit or not self.subscribed(api.UPDATE_POD_SANDBOX):
            return None
        return await self.call("UpdatePodSandbox", req, api.UpdatePodSandboxResponse)

    async def state_change(
        self, event: int, pod: api.PodSandbox, container: api.Container | None = None
    ) -> bool:
        """Relay a non-adjusting event as this runtime would; False if not subscribed."""
        if not self.subscribed(event):
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.runtime.request_timeout
        if self.profile.per_event_rpcs:
            rpc = STATE_EVENTS[event][1]
            req = getattr(api, rpc + "Request")(pod=pod)
            if container is not None and "container" in req.DESCRIPTOR.fields_by_name:
                req.container.CopyFrom(container)
            try:
                await self.call(rpc, req, getattr(api, rpc + "Response"))
                return True
            except TtrpcStatusError as exc:
                if exc.code != UNIMPLEMENTED:
                    raise
        change = api.StateChangeEvent(event=event, pod=pod)  # type: ignore[arg-type]
        if container is not None:
            change.container.CopyFrom(container)
        await self.call("StateChange", change, api.Empty, deadline - loop.time())
        return True

