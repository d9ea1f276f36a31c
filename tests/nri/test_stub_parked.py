"""Parked replies (ParkedReply), typed replies over the wire, and a handler thread the stub does not own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from stub_test_helpers import containers, make_stub, pods

from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CpusetUpdate, CreateReply, ParkedReply, UpdatesReply
from nri_pinner.nri.stub.handler_calls import HandlerThread, HandlerTimeout, call_with_budget
from nri_pinner.nri.stub.wire import UNKNOWN, TtrpcStatusError
from testkit.fake_runtime import CONTAINERD_2_1_9, CONTAINERD_2_3_0, FakeRuntime, running_stub

WAIT = 5.0  # upper bound for an event that should come at once; never slept


@pytest.fixture
def thread() -> Iterator[HandlerThread]:
    handlers = HandlerThread("svc-handlers")
    yield handlers
    handlers.stop()


async def wait_for(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, WAIT), "event not set in time"


async def on_thread(thread: HandlerThread, fn: Callable[[], object]) -> object:
    """Run ``fn`` as a call submitted to ``thread`` (as the service submits its own work) and await it."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[object] = loop.create_future()

    def call() -> None:
        result = fn()
        loop.call_soon_threadsafe(done.set_result, result)

    thread.submit(call)
    return await asyncio.wait_for(done, WAIT)


class Parking:
    """Handlers that park their reply; the test resolves it from a later call on the handler thread."""

    def __init__(self) -> None:
        self.parked: list[ParkedReply[Any]] = []
        self.called = threading.Event()
        self.threads: list[str] = []
        self.discarded: list[tuple[str, object]] = []
        self.discarded_event = threading.Event()

    def _park(self) -> ParkedReply[Any]:
        self.threads.append(threading.current_thread().name)
        deferred: ParkedReply[Any] = ParkedReply()
        self.parked.append(deferred)
        self.called.set()
        return deferred

    def create_container(self, req: api.CreateContainerRequest) -> ParkedReply[CreateReply]:
        return self._park()

    async def update_container(self, req: api.UpdateContainerRequest) -> ParkedReply[UpdatesReply]:
        return self._park()  # a coroutine that returns a ParkedReply

    def stop_container(self, req: api.StopContainerRequest) -> ParkedReply[UpdatesReply]:
        return self._park()

    def start_container(self, event: api.StateChangeEvent) -> ParkedReply[None]:
        return self._park()

    def fallback_create_container(self, req: api.CreateContainerRequest) -> CreateReply:
        return CreateReply(cpus="0-1")

    def discarded_reply(self, handler: str, args: tuple[Any, ...], outcome: object) -> None:
        self.discarded.append((handler, outcome))
        self.discarded_event.set()


# ----------------------------------------------------------------------------- call_with_budget


async def test_parked_reply_frees_the_thread_until_resolved(thread: HandlerThread) -> None:
    plugin = Parking()
    call = asyncio.create_task(call_with_budget(thread, plugin.create_container, (None,), WAIT, lambda _: None))
    await wait_for(plugin.called)
    deferred = plugin.parked[0]
    # The handler returned: the thread runs other calls while the reply is parked.
    assert await on_thread(thread, lambda: deferred.done) is False
    assert not call.done()
    await on_thread(thread, lambda: deferred.resolve(CreateReply(cpus="3")))
    assert await asyncio.wait_for(call, WAIT) == CreateReply(cpus="3")
    assert plugin.threads == ["svc-handlers"]


async def test_already_resolved_and_failed_deferreds(thread: HandlerThread) -> None:
    def resolved() -> ParkedReply[int]:
        d: ParkedReply[int] = ParkedReply()
        d.resolve(7)
        return d

    async def failing() -> ParkedReply[int]:
        d: ParkedReply[int] = ParkedReply()
        d.fail(LookupError("no NIC"))
        return d

    assert await call_with_budget(thread, resolved, (), WAIT, lambda _: None) == 7
    with pytest.raises(LookupError, match="no NIC"):
        await call_with_budget(thread, failing, (), WAIT, lambda _: None)


async def test_parked_past_the_budget_times_out_and_the_late_value_goes_to_on_late(thread: HandlerThread) -> None:
    plugin = Parking()
    late: list[object] = []
    got_late = threading.Event()

    def on_late(outcome: object) -> None:
        late.append((threading.current_thread().name, outcome))
        got_late.set()

    with pytest.raises(HandlerTimeout):
        await call_with_budget(thread, plugin.create_container, (None,), 0.05, on_late)
    assert late == []
    await on_thread(thread, lambda: plugin.parked[0].resolve(CreateReply(cpus="9")))
    await wait_for(got_late)
    assert late == [("svc-handlers", CreateReply(cpus="9"))]


# ----------------------------------------------------------------------------- through the stub


async def test_typed_replies_reach_the_runtime_as_response_bytes(sock_path: str) -> None:
    moved = (CpusetUpdate("ctr1", "0-1", "0", ignore_failure=True),)

    class Typed:
        def synchronize(self, pods: list[api.PodSandbox], ctrs: list[api.Container]) -> UpdatesReply:
            return UpdatesReply((CpusetUpdate("ctr0", "4-5", "1"),))

        def create_container(self, req: api.CreateContainerRequest) -> CreateReply:
            return CreateReply(cpus="2-3", mems="0", updates=moved)

        def update_container(self, req: api.UpdateContainerRequest) -> UpdatesReply:
            return UpdatesReply(moved)

        def stop_container(self, req: api.StopContainerRequest) -> UpdatesReply:
            return UpdatesReply((CpusetUpdate("ctr2", "0-7", ""),))

    async with FakeRuntime(CONTAINERD_2_1_9, pods=pods(3), containers=containers(3), sync_chunk=(2, 2)) as runtime:
        await runtime.listen(sock_path)
        async with running_stub(make_stub(Typed(), sock_path)):
            conn = await runtime.wait_ready()
            [synced] = conn.sync_updates
            assert (synced.container_id, synced.linux.resources.cpu.cpus, synced.linux.resources.cpu.mems) == (
                "ctr0", "4-5", "1")
            assert [len(r.update) for r in conn.sync_replies] == [0, 1]  # only the last chunk carries them
            created = await conn.create_container(api.CreateContainerRequest())
            assert created is not None
            expected = api.CreateContainerResponse()
            expected.adjust.linux.resources.cpu.cpus, expected.adjust.linux.resources.cpu.mems = "2-3", "0"
            update = expected.update.add(container_id="ctr1", ignore_failure=True)
            update.linux.resources.cpu.cpus, update.linux.resources.cpu.mems = "0-1", "0"
            assert created.SerializeToString() == expected.SerializeToString()
            updated = await conn.update_container(api.UpdateContainerRequest())
            assert updated is not None and list(updated.update) == list(expected.update)
            stopped = await conn.stop_container(api.StopContainerRequest())
            assert stopped is not None and [(u.container_id, u.linux.resources.cpu.cpus) for u in stopped.update] == [
                ("ctr2", "0-7")]


async def test_wrong_reply_type_is_an_error_status(sock_path: str) -> None:
    class Confused:
        def create_container(self, req: api.CreateContainerRequest) -> UpdatesReply:
            return UpdatesReply()

        def update_container(self, req: api.UpdateContainerRequest) -> CreateReply:
            return CreateReply(cpus="1")

    async with FakeRuntime(CONTAINERD_2_1_9) as runtime:
        await runtime.listen(sock_path)
        async with running_stub(make_stub(Confused(), sock_path)):
            conn = await runtime.wait_ready()
            with pytest.raises(TtrpcStatusError) as info:
                await conn.create_container(api.CreateContainerRequest())
            assert info.value.code == UNKNOWN and info.value.status_message == "create_container returned UpdatesReply"
            with pytest.raises(TtrpcStatusError) as info:
                await conn.update_container(api.UpdateContainerRequest())
            assert info.value.status_message == "update_container returned CreateReply"
            assert not conn.closed


async def park_then_resolve(plugin: Parking, thread: HandlerThread, request: Any, value: object) -> Any:
    """Send ``request``; once its handler parked the reply, check the thread is free, then resolve it."""
    plugin.called.clear()
    call = asyncio.create_task(request)
    await wait_for(plugin.called)
    deferred = plugin.parked[-1]
    assert await on_thread(thread, lambda: deferred.done) is False  # ran while the reply was parked
    assert not call.done()
    await on_thread(thread, lambda: deferred.resolve(value))
    return await asyncio.wait_for(call, WAIT)


async def test_parked_replies_answer_when_resolved_within_the_budget(sock_path: str, thread: HandlerThread) -> None:
    plugin = Parking()
    async with FakeRuntime(CONTAINERD_2_3_0) as runtime:
        await runtime.listen(sock_path)
        stub = make_stub(plugin, sock_path, handler_thread=thread)
        async with running_stub(stub):
            conn = await runtime.wait_ready()
            cases: list[tuple[Any, object]] = [
                (conn.create_container(api.CreateContainerRequest()), CreateReply(cpus="3", mems="1")),
                (conn.update_container(api.UpdateContainerRequest()), UpdatesReply((CpusetUpdate("a", "5", ""),))),
                (conn.stop_container(api.StopContainerRequest()), UpdatesReply((CpusetUpdate("b", "6", "0"),))),
                (conn.state_change(api.START_CONTAINER, api.PodSandbox(id="p"), api.Container(id="c")), None),
            ]
            answers = [await park_then_resolve(plugin, thread, request, value) for request, value in cases]
            created, updated, stopped, started = answers
            assert created.adjust.linux.resources.cpu.cpus == "3" and created.adjust.linux.resources.cpu.mems == "1"
            assert [(u.container_id, u.linux.resources.cpu.cpus) for u in updated.update] == [("a", "5")]
            assert [u.container_id for u in stopped.update] == ["b"]
            assert started is True
            assert set(plugin.threads) == {"svc-handlers"} and stub.stats.fallbacks == 0
        assert conn.calls[-1] == "StartContainer"


async def test_parked_past_the_budget_answers_fallback_then_discards(sock_path: str, thread: HandlerThread) -> None:
    plugin = Parking()
    async with FakeRuntime(CONTAINERD_2_1_9, request_timeout=0.6) as runtime:
        await runtime.listen(sock_path)
        stub = make_stub(plugin, sock_path, budget_margin=0.3, handler_thread=thread)
        async with running_stub(stub):
            conn = await runtime.wait_ready()
            created = await conn.create_container(api.CreateContainerRequest(container=api.Container(id="x")))
            assert created is not None and created.adjust.linux.resources.cpu.cpus == "0-1"  # the fallback
            assert stub.stats.fallbacks == 1 and plugin.discarded == []
            await on_thread(thread, lambda: plugin.parked[0].resolve(CreateReply(cpus="9")))
            await wait_for(plugin.discarded_event)
            assert plugin.discarded == [("create_container", CreateReply(cpus="9"))]
            assert stub.stats.late_replies == 1 and conn.calls.count("CreateContainer") == 1
            assert not conn.closed


async def test_failed_deferred_is_an_error_status(sock_path: str, thread: HandlerThread) -> None:
    plugin = Parking()
    async with FakeRuntime(CONTAINERD_2_1_9) as runtime:
        await runtime.listen(sock_path)
        async with running_stub(make_stub(plugin, sock_path, handler_thread=thread)):
            conn = await runtime.wait_ready()
            call = asyncio.create_task(conn.stop_container(api.StopContainerRequest()))
            await wait_for(plugin.called)
            await on_thread(thread, lambda: plugin.parked[0].fail(RuntimeError("cgroup gone")))
            with pytest.raises(TtrpcStatusError) as info:
                await asyncio.wait_for(call, WAIT)
            assert info.value.code == UNKNOWN and "stop_container: cgroup gone" in info.value.status_message
            assert not conn.closed


async def test_external_handler_thread_is_used_and_not_stopped(sock_path: str, thread: HandlerThread) -> None:
    class Plugin:
        def __init__(self) -> None:
            self.threads: list[str] = []

        def create_container(self, req: api.CreateContainerRequest) -> None:
            self.threads.append(threading.current_thread().name)

    plugin = Plugin()
    async with FakeRuntime(CONTAINERD_2_1_9) as runtime:
        await runtime.listen(sock_path)
        stub = make_stub(plugin, sock_path, handler_thread=thread)
        async with running_stub(stub):
            conn = await runtime.wait_ready()
            assert await conn.create_container(api.CreateContainerRequest()) == api.CreateContainerResponse()
    assert plugin.threads == ["svc-handlers"]
    # The stub has stopped; the thread it was given still runs submitted calls.
    assert await on_thread(thread, lambda: threading.current_thread().name) == "svc-handlers"


async def test_own_handler_thread_is_stopped_after_run(sock_path: str) -> None:
    seen: list[threading.Thread] = []

    class Plugin:
        def create_container(self, req: api.CreateContainerRequest) -> None:
            seen.append(threading.current_thread())

    async with FakeRuntime(CONTAINERD_2_1_9) as runtime:
        await runtime.listen(sock_path)
        async with running_stub(make_stub(Plugin(), sock_path)):
            conn = await runtime.wait_ready()
            await conn.create_container(api.CreateContainerRequest())
    [own] = seen
    assert own.name == "nri-42-test"
    own.join(WAIT)
    assert not own.is_alive()
