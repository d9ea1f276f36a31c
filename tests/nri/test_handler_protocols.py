"""The typed handler interface: Protocol discovery (event mask as before), ParkedReply, typed replies → bytes."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stub_test_helpers import NRI_PLUGINS_MASK, Recorder, WideRecorder

from examples.logger import EventLogger
from examples.pin_fixed import FixedPinner
from nri_pinner.nri import handlers as h
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub.handler_calls import (
    ADJUSTING_EVENTS,
    GENERIC_STATE_HANDLER,
    STATE_EVENTS,
    event_bit,
    handled_events,
    state_handler,
)
from nri_pinner.nri.stub.replies import WrongReplyType, container_update, create_response, response, synchronize_updates

# ----------------------------------------------------------------------------- discovery


def name_based_mask(plugin: object) -> int:
    """The stub's event mask before the Protocols: handlers found by ``callable(getattr(...))``."""

    def has(name: str) -> bool:
        return callable(getattr(plugin, name, None))

    mask = 0
    for event, (name, *_rest) in ADJUSTING_EVENTS.items():
        if has(name):
            mask |= event_bit(event)
    for event, (name, _rpc) in STATE_EVENTS.items():
        if has(GENERIC_STATE_HANDLER) or has(name):
            mask |= event_bit(event)
    return mask


class OnlyCreate(Recorder):
    def configure(self, req: api.ConfigureRequest) -> int:
        return 1 << (api.CREATE_CONTAINER - 1)


class CreateOnly:
    def create_container(self, req: api.CreateContainerRequest) -> None:
        return None


class Generic:
    def state_change(self, event: api.StateChangeEvent) -> None:
        return None


class GenericAndStart(Generic):
    def start_container(self, event: api.StateChangeEvent) -> None:
        return None


class OptedOut(Recorder):
    create_container = None  # type: ignore[assignment]  # a subclass switching a handler off


class NotCallable(CreateOnly):
    def __init__(self) -> None:
        self.stop_container = "not a handler"


class InstanceAttribute:
    def __init__(self) -> None:
        self.update_container: Callable[[api.UpdateContainerRequest], None] = lambda req: None


def bits(*events: int) -> int:
    return sum(event_bit(e) for e in set(events))


ALL_STATE = bits(*STATE_EVENTS)
PLUGINS: list[tuple[Callable[[], object], int]] = [
    (Recorder, NRI_PLUGINS_MASK),
    (WideRecorder, NRI_PLUGINS_MASK | 0x800),
    (OnlyCreate, NRI_PLUGINS_MASK),
    (CreateOnly, bits(api.CREATE_CONTAINER)),
    (Generic, ALL_STATE),  # every state event, none of the request events
    (GenericAndStart, ALL_STATE),
    (OptedOut, NRI_PLUGINS_MASK & ~bits(api.CREATE_CONTAINER)),
    (NotCallable, bits(api.CREATE_CONTAINER)),
    (InstanceAttribute, bits(api.UPDATE_CONTAINER)),
    (object, 0),
    (lambda: EventLogger(io.StringIO()),
     ALL_STATE | bits(*ADJUSTING_EVENTS) & ~bits(api.VALIDATE_CONTAINER_ADJUSTMENT)),
    (lambda: FixedPinner(io.StringIO(), "1"), bits(api.CREATE_CONTAINER, api.REMOVE_CONTAINER)),
]


@pytest.mark.parametrize(("make", "expected"), PLUGINS)
def test_protocol_event_mask_equals_the_name_based_one(make: Callable[[], object], expected: int) -> None:
    plugin = make()
    assert handled_events(plugin) == name_based_mask(plugin) == expected


def test_isinstance_finds_each_protocol_and_state_handler_prefers_the_specific_one() -> None:
    recorder = Recorder()
    assert isinstance(recorder, h.CreateContainerHandler) and isinstance(recorder, h.SynchronizeHandler)
    assert not isinstance(recorder, h.UpdatePodSandboxHandler) and not isinstance(recorder, h.StateChangeHandler)
    assert not isinstance(OptedOut(), h.CreateContainerHandler)
    both = GenericAndStart()
    assert state_handler(both, api.START_CONTAINER) == both.start_container
    assert state_handler(both, api.REMOVE_CONTAINER) == both.state_change
    assert state_handler(recorder, api.POST_START_CONTAINER) is None
    assert h.bound_handler(recorder, "no_such_handler") is None
    assert set(h.PROTOCOLS) >= {name for name, *_ in ADJUSTING_EVENTS.values()} | {n for n, _ in STATE_EVENTS.values()}


class TypedPlugin(h.CreateContainerHandler, h.UpdateContainerHandler, h.StopContainerHandler,
                  h.SynchronizeHandler, h.StartContainerHandler, h.CreateContainerFallback,
                  h.DiscardedReplyHook, h.ConnectionHooks):
    """Declares its Protocols, so mypy checks every signature below against them."""

    def create_container(self, req: api.CreateContainerRequest) -> h.CreateReply:
        return h.CreateReply(cpus="2")

    def update_container(self, req: api.UpdateContainerRequest) -> h.ParkedReply[h.UpdatesReply]:
        return h.ParkedReply()

    def stop_container(self, req: api.StopContainerRequest) -> h.UpdatesReply:
        return h.UpdatesReply()

    def synchronize(self, pods: list[api.PodSandbox], containers: list[api.Container]) -> h.UpdatesReply:
        return h.UpdatesReply()

    def start_container(self, event: api.StateChangeEvent) -> h.ParkedReply[None]:
        return h.ParkedReply()

    def fallback_create_container(self, req: api.CreateContainerRequest) -> h.CreateReply:
        return h.CreateReply()

    def discarded_reply(self, handler: str, args: tuple[Any, ...], outcome: object) -> None:
        return None

    def on_connect(self) -> None:
        return None

    def on_close(self) -> None:
        return None


def test_a_typed_plugin_is_its_protocols() -> None:
    plugin = TypedPlugin()
    assert isinstance(plugin, h.ConnectionHooks) and isinstance(plugin, h.CloseHook)
    assert not isinstance(plugin, h.ShutdownHandler)
    expected = bits(api.CREATE_CONTAINER, api.UPDATE_CONTAINER, api.STOP_CONTAINER, api.START_CONTAINER)
    assert handled_events(plugin) == expected


MYPY_SNIPPET = textwrap.dedent("""\
    from nri_pinner.nri import handlers as h
    from nri_pinner.nri.gen import api_pb2 as api


    class Good(h.CreateContainerHandler, h.StartContainerHandler):
        def create_container(self, req: api.CreateContainerRequest) -> h.ParkedReply[h.CreateReply]:
            return h.ParkedReply()

        def start_container(self, event: api.StateChangeEvent) -> None:
            return None


    class Bad(h.CreateContainerHandler, h.StartContainerHandler, h.DiscardedReplyHook):
        def create_container(self) -> h.CreateReply:  # line 14: the request is missing
            return h.CreateReply()

        def start_container(self, event: api.StateChangeEvent) -> h.ParkedReply[int]:  # line 17: wrong payload
            return h.ParkedReply()

        def discarded_reply(self, handler: str) -> None:  # line 20: too few arguments
            return None


    class Plain:
        def stop_container(self, req: api.StopContainerRequest, extra: int) -> h.UpdatesReply:
            return h.UpdatesReply()


    handler: h.StopContainerHandler = Plain()  # line 29: not a StopContainerHandler
    """)


def test_mypy_checks_a_plugin_against_the_protocols(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    source = tmp_path / "plugin_under_check.py"
    source.write_text(MYPY_SNIPPET)
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull,
                           "--no-error-summary", str(source)], cwd=repo, capture_output=True, text=True)
    error_lines = sorted({int(m.group(1)) for m in re.finditer(r"plugin_under_check\.py:(\d+): error", done.stdout)})
    assert error_lines == [14, 17, 20, 29], done.stdout + done.stderr


# ----------------------------------------------------------------------------- ParkedReply


def test_deferred_is_one_shot_and_calls_back_at_once_when_done() -> None:
    d: h.ParkedReply[int] = h.ParkedReply()
    seen: list[tuple[bool, object]] = []
    d.add_done_callback(lambda ok, value: seen.append((ok, value)))
    assert not d.done and seen == []
    d.resolve(1)
    d.resolve(2)  # ignored
    d.fail(RuntimeError("late"))  # ignored
    assert d.done and seen == [(True, 1)]
    d.add_done_callback(lambda ok, value: seen.append((ok, value)))
    assert seen == [(True, 1), (True, 1)]


def test_deferred_fail_reports_the_exception_and_every_callback_runs() -> None:
    d: h.ParkedReply[None] = h.ParkedReply()
    error = RuntimeError("no CPUs")
    seen: list[tuple[bool, object]] = []

    def broken(ok: bool, value: object) -> None:
        raise ValueError("callback bug")

    d.add_done_callback(broken)
    d.add_done_callback(lambda ok, value: seen.append((ok, value)))
    with pytest.raises(ValueError, match="callback bug"):
        d.fail(error)
    assert seen == [(False, error)] and d.done
    d.resolve(None)  # still one-shot
    assert seen == [(False, error)]


# ----------------------------------------------------------------------------- typed replies → bytes


def test_create_reply_bytes_decode_as_the_runtime_reads_them() -> None:
    reply = h.CreateReply(cpus="2-3", mems="0", updates=(
        h.CpusetUpdate("other", "0-1,4", "0-1", ignore_failure=True), h.CpusetUpdate("third", "5", ""),
    ))
    wire = create_response(reply).SerializeToString()
    decoded = api.CreateContainerResponse.FromString(wire)
    assert decoded.adjust.linux.resources.cpu.cpus == "2-3"
    assert decoded.adjust.linux.resources.cpu.mems == "0"
    assert [(u.container_id, u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems, u.ignore_failure)
            for u in decoded.update] == [("other", "0-1,4", "0-1", True), ("third", "5", "", False)]
    assert not decoded.adjust.linux.resources.HasField("memory")
    # what a hand-built response (as the service builds it today) encodes to, byte for byte
    expected = api.CreateContainerResponse()
    expected.adjust.linux.resources.cpu.cpus = "2-3"
    expected.adjust.linux.resources.cpu.mems = "0"
    for cid, cpus, mems, ignore in [("other", "0-1,4", "0-1", True), ("third", "5", "", False)]:
        u = expected.update.add(container_id=cid)
        u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems, u.ignore_failure = cpus, mems, ignore
    assert wire == expected.SerializeToString()


def test_create_reply_adjusts_only_the_fields_it_sets() -> None:
    assert create_response(h.CreateReply()).SerializeToString() == b""
    only_mems = api.CreateContainerResponse.FromString(create_response(h.CreateReply(mems="1")).SerializeToString())
    assert only_mems.adjust.linux.resources.cpu.mems == "1" and only_mems.adjust.linux.resources.cpu.cpus == ""
    only_cpus = api.CreateContainerResponse.FromString(create_response(h.CreateReply(cpus="7")).SerializeToString())
    assert only_cpus.adjust.linux.resources.cpu.cpus == "7" and not only_cpus.update
    # by hand: adjust (field 1) → linux (6) → resources (2) → cpu (2) → cpus (6) = "7", lengths 9, 7, 5, 3, 1
    assert create_response(h.CreateReply(cpus="7")).SerializeToString() == bytes.fromhex("0a09 3207 1205 1203 320137")


def test_a_cpu_quota_of_minus_one_is_a_present_optional_int64() -> None:
    """NRI's LinuxCPU.quota is an OptionalInt64 (field 2, a message holding int64 field 1): present means
    "set" (containerd/nri result.go: ``if v := cpu.GetQuota(); v != nil``), -1 goes out as Go's 10-byte
    varint, and runc applies -1 as no limit. Absent (None) leaves the kubelet's quota."""
    minus_one = "08" + "ff" * 9 + "01"  # OptionalInt64{value: -1}: 11 bytes
    # adjust (1) → linux (6) → resources (2) → cpu (2) → quota (2), lengths 19, 17, 15, 13, 11
    wire = create_response(h.CreateReply(cpu_quota=-1)).SerializeToString()
    assert wire == bytes.fromhex("0a13 3211 120f 120d 120b" + minus_one)
    cpu = api.CreateContainerResponse.FromString(wire).adjust.linux.resources.cpu
    assert cpu.HasField("quota") and cpu.quota.value == -1 and cpu.cpus == "" and not cpu.HasField("period")
    assert not api.CreateContainerResponse.FromString(
        create_response(h.CreateReply(cpus="7")).SerializeToString()).adjust.linux.resources.cpu.HasField("quota")
    # an update: container_id (1) "c", linux (2) → resources (1) → cpu (2) → quota (2) and cpus (6) "1"
    update = container_update(h.CpusetUpdate("c", "1", "", cpu_quota=-1))
    assert update.SerializeToString() == bytes.fromhex("0a0163 1214 0a12 1210 120b" + minus_one + "320131")
    assert not container_update(h.CpusetUpdate("c", "1", "")).linux.resources.cpu.HasField("quota")
    zero = api.ContainerUpdate.FromString(
        container_update(h.CpusetUpdate("c", "1", "", cpu_quota=0)).SerializeToString())
    assert zero.linux.resources.cpu.HasField("quota") and zero.linux.resources.cpu.quota.value == 0


@pytest.mark.parametrize("response_type", [api.UpdateContainerResponse, api.StopContainerResponse])
def test_updates_reply_becomes_the_update_list(response_type: Any) -> None:
    reply = h.UpdatesReply((h.CpusetUpdate("a", "1", "0"), h.CpusetUpdate("b", "2-3", "1", True)))
    decoded = response_type.FromString(response(reply, response_type).SerializeToString())
    assert [u.container_id for u in decoded.update] == ["a", "b"]
    assert decoded.update[1] == container_update(h.CpusetUpdate("b", "2-3", "1", True))
    assert decoded.update[1].ignore_failure and decoded.update[1].linux.resources.cpu.mems == "1"
    assert response(h.UpdatesReply(), response_type).SerializeToString() == b""


def test_raw_responses_pass_and_wrong_types_are_refused() -> None:
    raw = api.CreateContainerResponse()
    raw.adjust.linux.resources.memory.limit.value = 1 << 30  # beyond what a CreateReply carries
    assert response(raw, api.CreateContainerResponse) is raw
    assert response(None, api.StopContainerResponse) == api.StopContainerResponse()
    for result, response_type in [
        (h.UpdatesReply(), api.CreateContainerResponse),
        (h.CreateReply(), api.UpdateContainerResponse),
        (h.UpdatesReply(), api.UpdatePodSandboxResponse),
        (h.ParkedReply(), api.CreateContainerResponse),
        (api.StopContainerResponse(), api.UpdateContainerResponse),
    ]:
        with pytest.raises(WrongReplyType):
            response(result, response_type)


def test_synchronize_updates_from_typed_and_raw_replies() -> None:
    typed = synchronize_updates(h.UpdatesReply((h.CpusetUpdate("c", "3", "0"),)))
    assert api.SynchronizeResponse.FromString(api.SynchronizeResponse(update=typed).SerializeToString()).update[
        0].linux.resources.cpu.cpus == "3"
    raw = [api.ContainerUpdate(container_id="r")]
    assert synchronize_updates(raw) == raw and synchronize_updates(None) == []
    for wrong in [h.CreateReply(), "ctr0", 3, [h.CpusetUpdate("c", "1", "0")]]:
        with pytest.raises(WrongReplyType):
            synchronize_updates(wrong)
