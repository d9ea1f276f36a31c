"""The NRI plugin stub against the in-process fake runtime (v0.6.1, v0.8, v0.12 behaviour)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import structlog
import structlog.testing
import vectors as v
from stub_test_helpers import (
    NRI_PLUGINS_MASK,
    Recorder,
    WideRecorder,
    containers,
    cpus_adjustment,
    make_stub,
    pods,
)

from nri_pinner.nri import codec
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub import PluginConnectionLost, Stub
from nri_pinner.nri.stub.wire import UNIMPLEMENTED, TtrpcStatusError
from testkit.fake_runtime import (
    CONTAINERD_1_7_24,
    CONTAINERD_2_1_9,
    CONTAINERD_2_3_0,
    NRI_V0_12_1,
    FakeRuntime,
    running_stub,
)


async def test_v061_registration_configure_and_single_sync(sock_path: str) -> None:
    async with FakeRuntime(CONTAINERD_1_7_24, pods=pods(3), containers=containers(4)) as runtime:
        await runtime.listen(sock_path)
        plugin = Recorder()
        stub = make_stub(plugin, sock_path)
        async with running_stub(stub):
            conn = await runtime.wait_ready()
            assert (conn.name, conn.idx) == ("test", "42")
            assert conn.events == NRI_PLUGINS_MASK
            assert conn.configure_request is not None and conn.configure_request.request_timeout == 0
            assert len(conn.sync_requests) == 1 and not conn.sync_requests[0].more
            assert [u.container_id for u in conn.sync_updates] == ["ctr0"]
            assert plugin.sync_calls == [([f"pod{i}" for i in range(3)], [f"ctr{i}" for i in range(4)])]
            assert stub.runtime_nri_version == (0, 6, 1)
            assert stub.status()["runtime_nri_version_source"] == "inferred"
            assert stub.request_timeout == 2.0 and stub.request_budget == pytest.approx(1.7)
            assert not stub.supports_safe_unsolicited_updates
            response = await conn.create_container(api.CreateContainerRequest(container=api.Container(id="x")))
            assert response is not None and response.adjust.linux.resources.cpu.cpus == "1"
            assert await conn.state_change(api.START_CONTAINER, api.PodSandbox(id="p"), api.Container(id="x"))
            assert conn.calls[-1] == "StateChange"
            assert plugin.seen == [("create", "x"), ("start", "x")]


async def test_v08_chunked_sync_echoes_more_and_calls_plugin_once(sock_path: str) -> None:
    runtime = FakeRuntime(CONTAINERD_2_1_9, pods=pods(5), containers=containers(7), sync_chunk=(2, 2),
                          request_timeout=1.5, registration_timeout=4.0)
    async with runtime:
        await runtime.listen(sock_path)
        plugin = Recorder()
        stub = make_stub(plugin, sock_path)
        async with running_stub(stub):
            conn = await runtime.wait_ready()
            assert [r.more for r in conn.sync_requests] == [True, True, True, False]
            assert [r.more for r in conn.sync_replies] == [True, True, True, False]
            assert [len(r.update) for r in conn.sync_replies] == [0, 0, 0, 1]
            assert plugin.sync_calls == [([f"pod{i}" for i in range(5)], [f"ctr{i}" for i in range(7)])]
            assert (stub.request_timeout, stub.registration_timeout) == (1.5, 4.0)
            assert stub.runtime_nri_version == (0, 8, 0)


async def test_v012_dedicated_rpcs_reach_state_handlers_with_wide_mask(sock_path: str) -> None:
    async with FakeRuntime(CONTAINERD_2_3_0) as runtime:
        await runtime.listen(sock_path)
        plugin = WideRecorder()
        stub = make_stub(plugin, sock_path)
        async with running_stub(stub):
            conn = await runtime.wait_ready()
            assert conn.events == NRI_PLUGINS_MASK | 0x800
            assert stub.runtime_nri_version == (0, 12, 0)
            assert stub.status()["runtime_nri_version_source"] == "announced"
            pod, ctr = api.PodSandbox(id="p1"), api.Container(id="c1")
            await conn.state_change(api.RUN_POD_SANDBOX, pod)
            await conn.state_change(api.START_CONTAINER, pod, ctr)
            await conn.update_pod_sandbox(api.UpdatePodSandboxRequest(pod=pod))
            await conn.state_change(api.REMOVE_CONTAINER, pod, ctr)
            assert conn.calls[2:] == ["RunPodSandbox", "StartContainer", "UpdatePodSandbox", "RemoveContainer"]
            assert plugin.seen == [("run_pod", "p1"), ("start", "c1"), ("update_pod", "p1"), ("remove", "c1")]


@pytest.mark.parametrize("profile", [CONTAINERD_1_7_24, CONTAINERD_2_1_9])
async def test_wide_events_left_out_for_old_runtimes(sock_path: str, profile: Any) -> None:
    async with FakeRuntime(profile) as runtime:
        await runtime.listen(sock_path)
        async with running_stub(make_stub(WideRecorder(), sock_path)):
            conn = await runtime.wait_ready()  # raises if Configure failed ("invalid plugin events")
            assert conn.events == NRI_PLUGINS_MASK


async def test_configure_handler_narrows_the_mask(sock_path: str) -> None:
    class OnlyCreate(Recorder):
        def configure(self, req: api.ConfigureRequest) -> int:
            assert req.runtime_name == "containerd"
            return 1 << (api.CREATE_CONTAINER - 1) | 1 << 20  # bit 20: no such handler, dropped

    async with FakeRuntime(CONTAINERD_2_3_0) as runtime:
        await runtime.listen(sock_path)
        async with running_stub(make_stub(OnlyCreate(), sock_path)):
            conn = await runtime.wait_ready()
            assert conn.events == 0x8


async def test_unhandled_and_unknown_methods_answer_unimplemented(sock_path: str) -> None:
    class CreateOnly:
        def create_container(self, req: api.CreateContainerRequest) -> None:
            return None

    async with FakeRuntime(CONTAINERD_2_3_0) as runtime:
        await runtime.listen(sock_path)
        async with running_stub(make_stub(CreateOnly(), sock_path)):
            conn = await runtime.wait_ready()
            assert conn.events == 0x8
            calls: list[tuple[str, Any]] = [
                ("UpdateContainer", api.UpdateContainerRequest()),
                ("StopContainer", api.StopContainerRequest()),
                ("StateChange", api.StateChangeEvent(event=api.START_CONTAINER)),
                ("RunPodSandbox", api.RunPodSandboxRequest()),
                ("UpdatePodSandbox", api.UpdatePodSandboxRequest()),
                ("ValidateContainerAdjustment", api.ValidateContainerAdjustmentRequest()),
                ("Shutdown", api.Empty()),
                ("NoSuchMethod", api.Empty()),
            ]
            for method, message in calls:
                with pytest.raises(TtrpcStatusError) as info:
                    await conn.call(method, message, api.Empty)
                assert info.value.code == UNIMPLEMENTED, method
            assert not conn.closed  # Unimplemented is an answer, not a failure
            assert await conn.create_container(api.CreateContainerRequest()) == api.CreateContainerResponse()


async def test_update_containers_from_loop_and_from_handler(sock_path: str) -> None:
    class Updater(Recorder):
        stub: Stub

        async def create_container(self, req: api.CreateContainerRequest) -> Any:  # type: ignore[override]
            failed = await self.stub.update_containers([api.ContainerUpdate(container_id="bad")])
            return cpus_adjustment(",".join(u.container_id for u in failed))

    async with FakeRuntime(NRI_V0_12_1, failing_update_ids=["bad"]) as runtime:
        await runtime.listen(sock_path)
        plugin = Updater()
        stub = plugin.stub = make_stub(plugin, sock_path)
        async with running_stub(stub):
            conn = await runtime.wait_ready()
            assert stub.supports_safe_unsolicited_updates
            assert await stub.update_containers([api.ContainerUpdate(container_id="ok")]) == []
            response = await conn.create_container(api.CreateContainerRequest())
            assert response is not None and response.adjust.linux.resources.cpu.cpus == "bad"
            assert [[u.container_id for u in r.update] for r in conn.updates] == [["ok"], ["bad"]]


async def test_stub_configure_reply_matches_hand_computed_bytes() -> None:
    """The stub's answer to the canonical Configure frame is byte-identical to the vector."""
    runtime_end, plugin_end = socket.socketpair()
    env = {"NRI_PLUGIN_NAME": "cpupin", "NRI_PLUGIN_IDX": "90", "NRI_PLUGIN_SOCKET": str(plugin_end.detach())}
    stub = Stub(Recorder(), env=env)
    task = asyncio.create_task(stub.run())
    reader, writer = await asyncio.open_unix_connection(sock=runtime_end)
    decoder = codec.Decoder()
    messages: list[codec.TtrpcMessage] = []
    while not messages:
        messages += decoder.feed(await reader.read(4096))
    service, method, payload, timeout_ns = codec.decode_request(messages[0].payload)
    assert (service, method, timeout_ns) == (v.RUNTIME_SERVICE, "RegisterPlugin", 5_000_000_000)
    assert api.RegisterPluginRequest.FromString(payload).plugin_name == "cpupin"
    writer.write(v.REGISTER_PLUGIN_REPLY_FRAME + v.CONFIGURE_FRAME)
    reply = await reader.readexactly(len(v.CONFIGURE_REPLY_FRAME))
    assert reply == v.CONFIGURE_REPLY_FRAME
    writer.close()
    with pytest.raises(PluginConnectionLost):
        await asyncio.wait_for(task, 5)


def test_constructor_rejects_bad_identity_and_empty_plugins() -> None:
    with pytest.raises(ValueError, match="two digits"):
        Stub(Recorder(), name="x", idx="1", env={})
    with pytest.raises(ValueError, match="name"):
        Stub(Recorder(), name="bad name", idx="10", env={})
    with pytest.raises(ValueError, match="no NRI event handler"):
        Stub(object(), name="x", idx="10", env={})
    with pytest.raises(ValueError, match="file descriptor"):
        Stub(Recorder(), env={"NRI_PLUGIN_SOCKET": "three"})


async def test_structlog_logger_receives_key_value_events(sock_path: str) -> None:
    async with FakeRuntime(CONTAINERD_2_3_0) as runtime:
        await runtime.listen(sock_path)
        with structlog.testing.capture_logs() as logs:
            async with running_stub(make_stub(Recorder(), sock_path, logger=structlog.get_logger())):
                await runtime.wait_ready()
    configured = [e for e in logs if e["event"] == "configured"]
    assert configured and configured[0]["runtime_nri"] == "v0.12.0" and configured[0]["log_level"] == "info"


async def test_reply_over_ttrpc_limit_becomes_resource_exhausted(sock_path: str) -> None:
    class Huge(Recorder):
        def stop_container(self, req: api.StopContainerRequest) -> api.StopContainerResponse:
            big = api.ContainerUpdate(container_id="x" * (5 << 20))  # > 4 MiB: a Go peer would reject it
            return api.StopContainerResponse(update=[big])

    async with FakeRuntime(CONTAINERD_2_1_9) as runtime:
        await runtime.listen(sock_path)
        async with running_stub(make_stub(Huge(), sock_path)):
            conn = await runtime.wait_ready()
            with pytest.raises(TtrpcStatusError) as info:
                await conn.stop_container(api.StopContainerRequest())
            assert info.value.code == 8 and "too large" in info.value.status_message
            assert not conn.closed
