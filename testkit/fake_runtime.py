"""TEST DOUBLE: an in-process fake NRI runtime speaking the real wire format.

Not used in production. It lets the stub, the service and example plugins be tested without
containerd: a unix-socket listener (external plugins) or a socketpair (pre-installed plugins), and
per-version behaviour of the real runtime (containerd/nri ``pkg/adaptation``) selected by a
:class:`RuntimeProfile`:

* ``CONTAINERD_1_7_24`` (NRI v0.6.1): no timeouts in Configure, events 0x7FF, one unchunked
  Synchronize of up to 16 MiB (mux frame limit), everything else via StateChange.
* ``CONTAINERD_2_1_9`` (NRI v0.8.0): timeouts in Configure, Synchronize split into ``more`` chunks
  when over ttrpc's 4 MiB, replies checked ("plugin does not handle split sync requests").
* ``CONTAINERD_2_3_0`` (NRI v0.12.0): NRI_version announced, events 0x3FFF, a dedicated RPC per event
  with StateChange fallback on Unimplemented. ``NRI_V0_12_1`` adds the UpdateContainers fix.

Unsolicited UpdateContainers are recorded; with ``forbid_unsolicited_updates`` (the default for NRI
< v0.12.1, where they can deadlock containerd) they are refused and logged as errors, and
:meth:`FakeRuntime.assert_no_violations` (also run on ``async with`` exit) fails loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace
from types import TracebackType
from typing import Any

from nri_pinner.nri import codec, versions
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub.wire import KvLogger, TtrpcPeer
from testkit.fake_runtime_conn import PluginConnection, PluginDropped, RuntimeProfile

__all__ = [
    "CONTAINERD_1_7_24",
    "CONTAINERD_2_1_9",
    "CONTAINERD_2_3_0",
    "NRI_V0_12_1",
    "FakeRuntime",
    "PluginConnection",
    "PluginDropped",
    "RuntimeProfile",
    "running_stub",
]

V061_MAX_MUX_PAYLOAD = 1 << 24  # NRI v0.6.1 multiplexer: larger writes fail, nothing is split

CONTAINERD_1_7_24 = RuntimeProfile(
    label="nri-v0.6.1", runtime_name="containerd", runtime_version="1.7.24~ds1", nri_version="",
    sends_timeouts=False, valid_events=versions.VALID_EVENTS_V0_2, chunked_sync=False,
    per_event_rpcs=False, max_send=V061_MAX_MUX_PAYLOAD - codec.TTRPC_HEADER,
)
CONTAINERD_2_1_9 = RuntimeProfile(
    label="nri-v0.8.0", runtime_name="containerd", runtime_version="2.1.9+unknown", nri_version="",
    sends_timeouts=True, valid_events=versions.VALID_EVENTS_V0_2, chunked_sync=True,
    per_event_rpcs=False, max_send=codec.TTRPC_MAX_SEND,
)
CONTAINERD_2_3_0 = RuntimeProfile(
    label="nri-v0.12.0", runtime_name="containerd", runtime_version="v2.3.0", nri_version="v0.12.0",
    sends_timeouts=True, valid_events=versions.VALID_EVENTS_V0_10, chunked_sync=True,
    per_event_rpcs=True, max_send=codec.TTRPC_MAX_SEND,
)
NRI_V0_12_1 = replace(CONTAINERD_2_3_0, label="nri-v0.12.1", runtime_version="v2.4.0", nri_version="v0.12.1")

_MUX = struct.Struct(">II")
_TTRPC = struct.Struct(">IIBB")


def encode_like_go_v061(conn_id: int, stream_id: int, msg_type: int, body: bytes) -> bytes:
    """codec framing, plus NRI v0.6.1's acceptance of bodies over 4 MiB (up to the 16 MiB frame cap).

    Go's bufio.Writer emits the first 4096 bytes of the message, then the rest as one frame.
    """
    if len(body) <= codec.TTRPC_MAX_SEND:
        return codec.encode_message(conn_id, stream_id, msg_type, body)
    message = _TTRPC.pack(len(body), stream_id, msg_type, 0) + body
    head, rest = message[: codec.GO_READ_BUFFER], message[codec.GO_READ_BUFFER :]
    if len(rest) > V061_MAX_MUX_PAYLOAD:
        raise codec.MessageTooLarge(f"mux frame of {len(rest)} bytes exceeds NRI v0.6.1's 16 MiB limit")
    return _MUX.pack(conn_id, len(head)) + head + _MUX.pack(conn_id, len(rest)) + rest


class FakeRuntime:
    """Serves plugins; each connection is registered, configured and synchronized automatically."""

    def __init__(
        self,
        profile: RuntimeProfile = CONTAINERD_2_3_0,
        *,
        pods: Iterable[api.PodSandbox] = (),
        containers: Iterable[api.Container] = (),
        config: str = "",
        registration_timeout: float = 5.0,
        request_timeout: float = 2.0,
        sync_chunk: tuple[int, int] | None = None,
        forbid_unsolicited_updates: bool | None = None,
        failing_update_ids: Iterable[str] = (),
        erroring_update_ids: Iterable[str] = (),
        synchronize: bool = True,
        logger: Any = None,
    ) -> None:
        self.profile = profile
        self.pods = list(pods)
        self.containers = list(containers)
        self.config = config
        self.registration_timeout = registration_timeout
        self.request_timeout = request_timeout
        self.sync_chunk = sync_chunk  # forced (pods, containers) per Synchronize message, v0.8+
        if forbid_unsolicited_updates is None:
            announced = versions.parse_version(profile.nri_version)
            forbid_unsolicited_updates = not versions.safe_unsolicited_updates(announced)
        self.forbid_unsolicited_updates = forbid_unsolicited_updates
        self.failing_update_ids = frozenset(failing_update_ids)  # reported in `failed`
        self.erroring_update_ids = frozenset(erroring_update_ids)  # the whole call answers an error status
        self.synchronize = synchronize  # False: as containerd 1.7 with a pre-installed plugin (never synchronized)
        self.log = KvLogger(logger, "testkit.fake_runtime")
        self.plugins: list[PluginConnection] = []
        self._handshakes: asyncio.Queue[PluginConnection] = asyncio.Queue()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # ----------------------------------------------------------------------------- transports

    async def listen(self, path: str) -> None:
        """Accept external plugins on a unix socket, as the runtime does at ``socket_path``."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self._server = await asyncio.start_unix_server(self._accept, path)

    async def stop_listening(self) -> None:
        """Stop accepting and drop every plugin (the runtime went away)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for plugin in self.plugins:
            plugin.close("runtime shutting down")

    def socketpair(self) -> socket.socket:
        """Pre-installed mode: serve one end; return the plugin's end (pass its fd to the plugin)."""
        runtime_end, plugin_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plugin_end.set_inheritable(True)

        async def serve() -> None:
            reader, writer = await asyncio.open_unix_connection(sock=runtime_end)
            await self._accept(reader, writer)

        self._spawn(serve())
        return plugin_end

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = PluginConnection(self, len(self.plugins) + 1)
        self.plugins.append(conn)
        big = self.profile.max_send > codec.TTRPC_MAX_SEND
        encoder = encode_like_go_v061 if big else codec.encode_message
        conn.peer = TtrpcPeer(
            reader, writer, serve_conn=codec.RUNTIME_SERVICE_CONN, call_conn=codec.PLUGIN_SERVICE_CONN,
            handler=conn.serve, logger=self.log, name=f"runtime:{conn.label}", encoder=encoder,
        )
        reader_task = asyncio.create_task(conn.peer.run())
        await conn.handshake(self.pods, self.containers)
        self._handshakes.put_nowait(conn)
        await reader_task

    # ----------------------------------------------------------------------------- test API

    async def wait_plugin(self, timeout: float = 5.0) -> PluginConnection:
        """Next connection whose handshake ended: check ``conn.ready`` / ``conn.error``."""
        async with asyncio.timeout(timeout):
            return await self._handshakes.get()

    async def wait_ready(self, timeout: float = 5.0) -> PluginConnection:
        """Next connection that registered, configured and synchronized; raises on a failed one."""
        conn = await self.wait_plugin(timeout)
        if not conn.ready.is_set():
            raise PluginDropped(f"{conn.label} failed its handshake: {conn.error}")
        return conn

    def assert_no_violations(self) -> None:
        forbidden = [req for conn in self.plugins for req in conn.forbidden_updates]
        if forbidden:
            raise AssertionError(
                f"{len(forbidden)} unsolicited UpdateContainers reached a runtime with "
                f"{self.profile.label}, where they can deadlock containerd"
            )

    async def close(self) -> None:
        await self.stop_listening()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> FakeRuntime:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
        if exc_type is None:
            self.assert_no_violations()


@contextlib.asynccontextmanager
async def running_stub(stub: Any, stop_timeout: float = 5.0) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``stub.run()`` in a task for the duration of the block; stop it and wait afterwards."""
    task = asyncio.get_running_loop().create_task(stub.run())
    try:
        yield task
    finally:
        await stub.stop()
        done, _ = await asyncio.wait({task}, timeout=stop_timeout)
        if not done:
            task.cancel()
            raise AssertionError(f"stub did not stop within {stop_timeout}s")
        if not task.cancelled():
            task.exception()  # retrieved: a test that cares awaits the task itself
