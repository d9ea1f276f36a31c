"""The fake runtime (test double) against hand-computed bytes and hand-driven plugins.

A raw plugin here writes frames itself, so the fake runtime's behaviour is checked without the stub,
and its output is compared with tests/nri/vectors.py so a shared codec bug cannot hide.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import vectors as v

from nri_pinner.nri import codec
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub import Stub
from nri_pinner.nri.stub.wire import UNIMPLEMENTED, TtrpcStatusError
from testkit.fake_runtime import (
    CONTAINERD_1_7_24,
    CONTAINERD_2_1_9,
    CONTAINERD_2_3_0,
    NRI_V0_12_1,
    FakeRuntime,
    PluginDropped,
    RuntimeProfile,
    encode_like_go_v061,
    running_stub,
)

# containerd 1.7.24 as in the vector: runtime_version "v1.7.24", no timeouts, default 2 s request timeout.
VECTOR_RUNTIME = replace(CONTAINERD_1_7_24, runtime_version="v1.7.24")


class RawPlugin:
    """A plugin written by hand: reads whole ttrpc messages, writes raw frames."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = codec.Decoder()
        self.queue: list[codec.TtrpcMessage] = []

    async def next_message(self) -> codec.TtrpcMessage:
        while not self.queue:
            data = await asyncio.wait_for(self.reader.read(1 << 16), 5)
            assert data, "runtime closed the connection"
            self.queue += self.decoder.feed(data)
        return self.queue.pop(0)

    async def next_request(self) -> tuple[int, str, bytes]:
        message = await self.next_message()
        assert (message.conn_id, message.msg_type) == (codec.PLUGIN_SERVICE_CONN, codec.MSG_REQUEST)
        service, method, payload, _ = codec.decode_request(message.payload)
        assert service == v.PLUGIN_SERVICE
        return message.stream_id, method, payload

    def reply(self, stream_id: int, payload: bytes = b"", code: int = 0, text: str = "") -> None:
        body = codec.encode_response(payload, code, text)
        self.writer.write(codec.encode_message(codec.PLUGIN_SERVICE_CONN, stream_id, codec.MSG_RESPONSE, body))

    async def register(self) -> None:
        self.writer.write(v.REGISTER_PLUGIN_FRAME)
        message = await self.next_message()
        assert (message.conn_id, message.stream_id, message.msg_type) == (2, 1, codec.MSG_RESPONSE)

    async def configure(self, events: int) -> None:
        stream, method, _ = await self.next_request()
        assert method == "Configure"
        self.reply(stream, api.ConfigureResponse(events=events).SerializeToString())


_open_writers: list[asyncio.StreamWriter] = []


@pytest.fixture(autouse=True)
async def close_raw_plugins() -> AsyncIterator[None]:
    yield
    while _open_writers:
        writer = _open_writers.pop()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def raw(runtime: FakeRuntime) -> RawPlugin:
    reader, writer = await asyncio.open_unix_connection(sock=runtime.socketpair())
    _open_writers.append(writer)
    return RawPlugin(reader, writer)


async def test_runtime_bytes_match_hand_computed_vectors() -> None:
    async with FakeRuntime(VECTOR_RUNTIME) as runtime:
        reader, writer = await asyncio.open_unix_connection(sock=runtime.socketpair())
        _open_writers.append(writer)
        writer.write(v.REGISTER_PLUGIN_FRAME)
        # Registration reply and the Configure request, byte for byte (order on the wire is fixed:
        # the runtime answers RegisterPlugin before it starts configuring).
        expected = v.REGISTER_PLUGIN_REPLY_FRAME + v.CONFIGURE_FRAME
        assert await asyncio.wait_for(reader.readexactly(len(expected)), 5) == expected
        writer.write(v.CONFIGURE_REPLY_FRAME)
        plugin = RawPlugin(reader, writer)
        stream, method, payload = await plugin.next_request()
        assert (stream, method) == (3, "Synchronize")
        assert api.SynchronizeRequest.FromString(payload) == api.SynchronizeRequest()
        plugin.reply(stream)
        conn = await runtime.wait_ready()
        assert conn.events == 0x6AF and (conn.name, conn.idx) == ("cpupin", "90")
        writer.close()


async def test_unimplemented_reply_frame_is_understood_as_code_12() -> None:
    async with FakeRuntime(VECTOR_RUNTIME) as runtime:
        plugin = await raw(runtime)
        await plugin.register()
        await plugin.configure(0)  # 0 = every valid event
        stream, _, _ = await plugin.next_request()
        plugin.reply(stream)
        conn = await runtime.wait_ready()
        assert conn.events == 0x7FF
        pending = asyncio.create_task(conn.call("Shutdown", api.Empty(), api.Empty))
        stream, method, _ = await plugin.next_request()
        assert (stream, method) == (5, "Shutdown")
        # Hand-computed frame answers stream 3; rewrite only the stream id (bytes 12..15).
        frame = bytearray(v.UNIMPLEMENTED_REPLY_FRAME)
        frame[12:16] = struct.pack(">I", stream)
        plugin.writer.write(bytes(frame))
        with pytest.raises(TtrpcStatusError) as info:
            await pending
        assert (info.value.code, info.value.status_message) == (UNIMPLEMENTED, "not implemented")


@pytest.mark.parametrize(
    ("profile", "events", "accepted"),
    [(CONTAINERD_1_7_24, 0x800, False), (CONTAINERD_2_1_9, 0x2000, False), (CONTAINERD_2_3_0, 0x2800, True)],
)
async def test_event_mask_checked_against_runtime_version(
    profile: RuntimeProfile, events: int, accepted: bool
) -> None:
    async with FakeRuntime(profile) as runtime:
        plugin = await raw(runtime)
        await plugin.register()
        await plugin.configure(events | 0x8)
        if accepted:
            stream, _, _ = await plugin.next_request()
            plugin.reply(stream)
            assert (await runtime.wait_ready()).events == events | 0x8
        else:
            conn = await runtime.wait_plugin()
            assert not conn.ready.is_set()
            assert conn.error is not None and f"invalid plugin events: 0x{events:x}" in conn.error
            assert conn.closed


def test_configure_request_fields_per_version() -> None:
    # What each profile announces: timeouts only from v0.8, NRI_version only from v0.12.
    assert (CONTAINERD_1_7_24.sends_timeouts, CONTAINERD_1_7_24.nri_version) == (False, "")
    assert (CONTAINERD_2_1_9.sends_timeouts, CONTAINERD_2_1_9.nri_version) == (True, "")
    assert CONTAINERD_2_3_0.nri_version == "v0.12.0" and NRI_V0_12_1.nri_version == "v0.12.1"


@pytest.mark.parametrize("mistake", ["updates", "no-echo"])
async def test_split_sync_mistakes_close_the_plugin(mistake: str) -> None:
    pods = [api.PodSandbox(id=f"p{i}") for i in range(4)]
    async with FakeRuntime(CONTAINERD_2_1_9, pods=pods, sync_chunk=(2, 0)) as runtime:
        plugin = await raw(runtime)
        await plugin.register()
        await plugin.configure(0x8)
        stream, method, payload = await plugin.next_request()
        assert method == "Synchronize" and api.SynchronizeRequest.FromString(payload).more
        bad = (api.SynchronizeResponse(more=True, update=[api.ContainerUpdate(container_id="c")])
               if mistake == "updates" else api.SynchronizeResponse(more=False))
        plugin.reply(stream, bad.SerializeToString())
        conn = await runtime.wait_plugin()
        assert conn.error is not None and "plugin does not handle split sync requests" in conn.error


async def test_oversize_sync_is_split_under_the_ttrpc_limit_on_v08() -> None:
    ctrs = [api.Container(id=f"c{i}", annotations={"blob": "y" * (400 << 10)}) for i in range(20)]  # ~8 MiB
    async with FakeRuntime(CONTAINERD_2_1_9, containers=ctrs) as runtime:
        seen: list[int] = []

        class Counter:
            def synchronize(self, pods: list[api.PodSandbox], containers: list[api.Container]) -> None:
                seen.append(len(containers))

            def remove_container(self, event: api.StateChangeEvent) -> None:
                pass

        fd = runtime.socketpair().detach()
        stub = Stub(Counter(), env={"NRI_PLUGIN_NAME": "count", "NRI_PLUGIN_IDX": "10", "NRI_PLUGIN_SOCKET": str(fd)})
        async with running_stub(stub):
            conn = await runtime.wait_ready()
        assert len(conn.sync_requests) > 1 and all(r.ByteSize() < codec.TTRPC_MAX_SEND for r in conn.sync_requests)
        assert [r.more for r in conn.sync_requests][-1] is False
        assert seen == [20]


async def test_late_reply_closes_the_plugin() -> None:
    async with FakeRuntime(CONTAINERD_2_1_9, request_timeout=0.3) as runtime:
        plugin = await raw(runtime)
        await plugin.register()
        await plugin.configure(0x8)
        stream, _, _ = await plugin.next_request()
        plugin.reply(stream)
        conn = await runtime.wait_ready()
        pending = asyncio.create_task(conn.create_container(api.CreateContainerRequest()))
        stream, method, _ = await plugin.next_request()
        assert method == "CreateContainer"
        with pytest.raises(PluginDropped, match="request timeout"):
            await pending
        assert conn.closed and conn.error is not None and "deadline exceeded" in conn.error


async def test_v012_falls_back_to_state_change_on_unimplemented() -> None:
    async with FakeRuntime(CONTAINERD_2_3_0) as runtime:
        plugin = await raw(runtime)
        await plugin.register()
        await plugin.configure(0x1)
        stream, _, _ = await plugin.next_request()
        plugin.reply(stream)
        conn = await runtime.wait_ready()
        pending = asyncio.create_task(conn.state_change(api.RUN_POD_SANDBOX, api.PodSandbox(id="p9")))
        stream, method, _ = await plugin.next_request()
        assert method == "RunPodSandbox"
        plugin.reply(stream, code=UNIMPLEMENTED, text="nope")
        stream, method, payload = await plugin.next_request()
        assert method == "StateChange"
        event = api.StateChangeEvent.FromString(payload)
        assert (event.event, event.pod.id) == (api.RUN_POD_SANDBOX, "p9")
        plugin.reply(stream)
        assert await pending is True
        assert await conn.state_change(api.START_CONTAINER, api.PodSandbox()) is False  # not subscribed


async def ready_raw(runtime: FakeRuntime) -> RawPlugin:
    plugin = await raw(runtime)
    await plugin.register()
    await plugin.configure(0x8)
    stream, _, _ = await plugin.next_request()
    plugin.reply(stream)
    await runtime.wait_ready()
    return plugin


async def send_update_containers(plugin: RawPlugin, update: api.ContainerUpdate) -> tuple[bytes, int, str]:
    request = api.UpdateContainersRequest(update=[update]).SerializeToString()
    body = codec.encode_request(v.RUNTIME_SERVICE, "UpdateContainers", request)
    plugin.writer.write(codec.encode_message(codec.RUNTIME_SERVICE_CONN, 3, codec.MSG_REQUEST, body))
    message = await plugin.next_message()
    assert (message.conn_id, message.stream_id, message.msg_type) == (2, 3, codec.MSG_RESPONSE)
    return codec.decode_response(message.payload)


async def test_unsolicited_updates_recorded_on_v0121() -> None:
    update = api.ContainerUpdate(container_id="c1")
    async with FakeRuntime(NRI_V0_12_1, failing_update_ids=["c1"]) as runtime:
        assert not runtime.forbid_unsolicited_updates
        plugin = await ready_raw(runtime)
        payload, code, _ = await send_update_containers(plugin, update)
        assert code == 0 and list(api.UpdateContainersResponse.FromString(payload).failed) == [update]
        assert [list(r.update) for r in runtime.plugins[0].updates] == [[update]]


async def test_unsolicited_updates_forbidden_before_v0121_fail_loudly() -> None:
    runtime = FakeRuntime(CONTAINERD_2_1_9)
    assert runtime.forbid_unsolicited_updates
    plugin = await ready_raw(runtime)
    _, code, text = await send_update_containers(plugin, api.ContainerUpdate(container_id="c1"))
    assert code != 0 and "forbidden" in text
    with pytest.raises(AssertionError, match="can deadlock containerd"):
        async with runtime:
            pass


def test_v061_framing_of_bodies_over_4_mib() -> None:
    body = bytes(range(256)) * ((5 << 20) // 256)
    frames = encode_like_go_v061(1, 7, codec.MSG_REQUEST, body)
    total = codec.TTRPC_HEADER + len(body)
    # First frame: 4096 bytes (Go's bufio.Writer buffer), header included; then the rest in one frame.
    assert frames[:8] == struct.pack(">II", 1, 4096)
    assert frames[8:18] == struct.pack(">IIBB", len(body), 7, 1, 0)
    assert frames[8 + 4096 : 16 + 4096] == struct.pack(">II", 1, total - 4096)
    assert len(frames) == total + 16
    (message,) = codec.Decoder().feed(frames)
    assert message.payload == body and message.stream_id == 7
    with pytest.raises(codec.MessageTooLarge):
        codec.encode_message(1, 7, codec.MSG_REQUEST, body)  # ttrpc v0.8+ peers refuse it
