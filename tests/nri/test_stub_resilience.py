"""Stub resilience: handler budgets and fallbacks, reconnects, bad input, pre-installed mode, big syncs."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
import vectors as v
from stub_test_helpers import (
    Recorder,
    containers,
    cpus_adjustment,
    make_stub,
)

from nri_pinner.nri import codec
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub import PluginConnectionLost, Stub
from nri_pinner.nri.stub.wire import UNKNOWN, TtrpcStatusError
from testkit.fake_runtime import (
    CONTAINERD_1_7_24,
    CONTAINERD_2_1_9,
    CONTAINERD_2_3_0,
    FakeRuntime,
    running_stub,
)


class SlowCreate:
    """create_container overruns its budget, blocking its thread or awaiting."""

    def __init__(self, seconds: float, blocking: bool, fallback: bool) -> None:
        self.seconds, self.blocking = seconds, blocking
        self.finished = threading.Event()
        self.discarded: list[tuple[str, Any]] = []
        if fallback:
            self.fallback_create_container = lambda req: cpus_adjustment("0-1")

    def create_container(self, req: api.CreateContainerRequest) -> Any:
        if self.blocking:
            time.sleep(self.seconds)  # blocks the handler thread, as CPU-bound work or fsync would
            self.finished.set()
            return cpus_adjustment("7")

        async def slow() -> api.CreateContainerResponse:
            await asyncio.sleep(self.seconds)
            self.finished.set()
            return cpus_adjustment("7")

        return slow()

    def discarded_reply(self, handler: str, args: tuple[Any, ...], outcome: Any) -> None:
        self.discarded.append((handler, outcome))


@pytest.mark.parametrize(("blocking", "fallback"), [(True, True), (False, False)])
async def test_overrunning_handler_is_answered_with_fallback_in_time(
    sock_path: str, blocking: bool, fallback: bool
) -> None:
    # Runtime timeout 1.0 s; stub budget 1.0 - 0.5 = 0.5 s; the handler needs 1.5 s.
    async with FakeRuntime(CONTAINERD_2_1_9, request_timeout=1.0) as runtime:
        await runtime.listen(sock_path)
        plugin = SlowCreate(1.5, blocking=blocking, fallback=fallback)
        stub = make_stub(plugin, sock_path, budget_margin=0.5)
        async with running_stub(stub):
            conn = await runtime.wait_ready()
            response = await conn.create_container(api.CreateContainerRequest())  # PluginDropped if late
            expected = cpus_adjustment("0-1") if fallback else api.CreateContainerResponse()
            assert response == expected
            assert not conn.closed and stub.stats.fallbacks == 1
            assert await asyncio.to_thread(plugin.finished.wait, 5.0)
            for _ in range(100):
                if plugin.discarded:
                    break
                await asyncio.sleep(0.01)
            assert plugin.discarded == [("create_container", cpus_adjustment("7"))]
            assert stub.stats.late_replies == 1
            assert conn.calls.count("CreateContainer") == 1  # the late answer never reached the wire


async def test_handler_and_fallback_errors_become_error_status(sock_path: str) -> None:
    class Failing:
        def create_container(self, req: api.CreateContainerRequest) -> None:
            raise RuntimeError("no CPUs left")

        def stop_container(self, req: api.StopContainerRequest) -> None:
            time.sleep(1.0)

        def fallback_stop_container(self, req: api.StopContainerRequest) -> None:
            raise RuntimeError("cannot decide")

    async with FakeRuntime(CONTAINERD_2_1_9, request_timeout=0.6) as runtime:
        await runtime.listen(sock_path)
        async with running_stub(make_stub(Failing(), sock_path, budget_margin=0.3)):
            conn = await runtime.wait_ready()
            with pytest.raises(TtrpcStatusError) as info:
                await conn.create_container(api.CreateContainerRequest())
            assert info.value.code == UNKNOWN and "no CPUs left" in info.value.status_message
            with pytest.raises(TtrpcStatusError) as info:
                await conn.stop_container(api.StopContainerRequest())
            assert "cannot decide" in info.value.status_message
            assert not conn.closed


async def test_reconnects_with_backoff_and_runs_hooks(sock_path: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)

    class Hooked(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.hooks: list[str] = []

        def on_connect(self) -> None:
            self.hooks.append("connect")

        def on_close(self) -> None:
            self.hooks.append("close")

    plugin = Hooked()
    stub = make_stub(plugin, sock_path)  # backoff 0.02 s doubling, capped at 0.1 s
    async with running_stub(stub):
        retries: list[str] = []
        for _ in range(500):  # no runtime yet: connection attempts back off
            retries = [r.getMessage() for r in caplog.records if "cannot connect" in r.getMessage()]
            if len(retries) >= 6:
                break
            await asyncio.sleep(0.01)
        delays = [float(m.split("retry_in_s=")[1].split()[0]) for m in retries]
        assert delays[:4] == [0.02, 0.04, 0.08, 0.1] and set(delays[4:]) <= {0.1}
        async with FakeRuntime(CONTAINERD_2_1_9) as first:
            await first.listen(sock_path)
            await first.wait_ready()
        caplog.clear()
        async with FakeRuntime(CONTAINERD_2_3_0) as second:  # the runtime restarted
            await second.listen(sock_path)
            conn = await second.wait_ready()
            assert stub.synchronized and stub.runtime_nri_version == (0, 12, 0)
        reconnect = [r.getMessage() for r in caplog.records if r.getMessage().startswith("reconnecting")]
        assert reconnect and "in_s=0.02" in reconnect[0]  # a good registration reset the backoff
    assert conn.closed
    assert stub.stats.registrations == 2
    assert plugin.hooks[:4] == ["connect", "close", "connect", "close"]


@pytest.mark.parametrize(
    ("poison", "reason"),
    [
        (v.CONFIGURE_FRAME[:40], "truncated"),  # runtime dies mid-request
        (b"\x00\x00\x00\x00\x00\x00\x00\x01\xff", "reserved ConnID 0"),
        (b"\x00\x00\x00\x01\x01\x00\x00\x0b", "announces"),  # 16 MiB + 11 bytes: oversize
    ],
)
async def test_bad_input_from_runtime_is_logged_and_followed_by_reconnect(
    sock_path: str, caplog: pytest.LogCaptureFixture, poison: bytes, reason: str
) -> None:
    caplog.set_level(logging.INFO)
    bad_runtime_done = asyncio.Event()

    async def bad_runtime(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(8 + int.from_bytes((await reader.readexactly(8))[4:], "big") - 8)
        writer.write(v.REGISTER_PLUGIN_REPLY_FRAME + poison)
        await writer.drain()
        writer.close()
        bad_runtime_done.set()

    server = await asyncio.start_unix_server(bad_runtime, sock_path)
    stub = make_stub(Recorder(), sock_path)
    async with running_stub(stub):
        await asyncio.wait_for(bad_runtime_done.wait(), 5)
        server.close()
        await server.wait_closed()
        async with FakeRuntime(CONTAINERD_2_1_9) as runtime:
            await runtime.listen(sock_path)
            await runtime.wait_ready()
    closes = [r for r in caplog.records if r.name == "nri_pinner.nri.stub" and "closed" in r.getMessage()]
    assert any(reason in r.getMessage() and r.levelno == logging.ERROR for r in closes)
    assert all(r.exc_info is None for r in caplog.records)
    assert stub.stats.connections == 2


async def test_preinstalled_mode_uses_inherited_fd_and_exits_on_close() -> None:
    async with FakeRuntime(CONTAINERD_1_7_24) as runtime:
        plugin_end = runtime.socketpair()
        env = {"NRI_PLUGIN_NAME": "pinner", "NRI_PLUGIN_IDX": "60", "NRI_PLUGIN_SOCKET": str(plugin_end.detach())}
        stub = Stub(Recorder(), env=env)
        assert stub.preinstalled and stub.full_name == "60-pinner"
        task = asyncio.create_task(stub.run())
        conn = await runtime.wait_ready()
        assert (conn.name, conn.idx) == ("pinner", "60")
        conn.close("runtime stopped")
        with pytest.raises(PluginConnectionLost):
            await asyncio.wait_for(task, 5)


async def test_six_mib_unchunked_sync_is_accepted(sock_path: str) -> None:
    big = [api.PodSandbox(id=f"pod{i}", annotations={"blob": "x" * (1 << 20)}) for i in range(6)]
    async with FakeRuntime(CONTAINERD_1_7_24, pods=big, containers=containers(6)) as runtime:
        await runtime.listen(sock_path)
        plugin = Recorder()
        async with running_stub(make_stub(plugin, sock_path)):
            conn = await runtime.wait_ready()
            assert len(conn.sync_requests) == 1
            assert conn.sync_requests[0].ByteSize() > 6 << 20 > codec.TTRPC_MAX_SEND
            assert plugin.sync_calls == [([f"pod{i}" for i in range(6)], [f"ctr{i}" for i in range(6)])]
