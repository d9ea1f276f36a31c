"""Plugin restarts through the whole stack: the checkpoint file one run writes is read by the next, a
bad one is reported and the state rebuilt from Synchronize, a chunked Synchronize and a reconnect.
The rebuild rules (unknown containers, a changed reserved set, sidecars) are tested at the core:
tests/core/test_core_restart.py."""

from __future__ import annotations

import json
from collections.abc import Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from svc_harness import (
    DUAL_SOCKET,
    assignments,
    checkpoint_entries,
    container,
    cpuset_updates,
    create,
    make_settings,
    mems_for,
    new_service,
    pod,
    running,
)

from nri_pinner.config import Settings
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_1_9

GOLD, BURST = pod("gold"), pod("burst", "burstable")


async def first_run(settings: Settings) -> tuple[CPUSet, CPUSet]:
    """Run 1: a guaranteed (2 CPUs) and a burstable container; returns (exclusive, shared)."""
    async with running(settings) as r:
        await r.conn.create_container(create(BURST, container(BURST, "app", 100)))
        reply = await r.conn.create_container(create(GOLD, container(GOLD, "app", 2000, 2000)))
        assert reply is not None
        exclusive = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        return exclusive, r.topology.online - exclusive


def as_running(exclusive: CPUSet, shared: CPUSet, extra: Sequence[api.Container] = ()) -> list[api.Container]:
    """What the runtime lists in Synchronize: the containers with the cpusets they run with."""
    topo = discover(str(DUAL_SOCKET))
    return [container(GOLD, "app", 2000, 2000, cpus=str(exclusive), mems=mems_for(topo, exclusive)),
            container(BURST, "app", 100, cpus=str(shared), mems=mems_for(topo, shared)), *extra]


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if str(e["event"]).startswith(name)]


async def test_exclusive_cpus_survive_a_restart(workdir: Path) -> None:
    settings = make_settings(workdir)
    exclusive, shared = await first_run(settings)
    with structlog.testing.capture_logs() as logs:
        async with running(settings, pods=[GOLD, BURST], containers=as_running(exclusive, shared)) as r:
            assert r.conn.sync_updates == []  # everyone already runs where the checkpoint says
            rows = assignments(r.svc)
            assert rows["gold-app"]["exclusive"] and rows["gold-app"]["cpus"] == str(exclusive)
            assert rows["burst-app"]["cpus"] == str(shared)
            # a new guaranteed container cannot get the restored CPUs
            reply = await r.conn.create_container(create(GOLD, container(GOLD, "next", 2000, 2000)))
            assert reply is not None
            assert CPUSet.parse(reply.adjust.linux.resources.cpu.cpus).isdisjoint(exclusive)
    assert not events(logs, "checkpoint not used")
    assert not events(logs, "state repaired")  # restored from the checkpoint, not adopted


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def bad_checksum(data: bytes) -> bytes:
    doc = json.loads(data)
    doc["body"]["shared"] = "0-11"
    return json.dumps(doc).encode()


KUBELET_STATE = json.dumps({"policyName": "static", "defaultCpuSet": "0-1,3-7,9-11",
                            "entries": {"uid-gold": {"app": "2,8"}}, "checksum": 1234567890}).encode()

CORRUPTIONS = [
    pytest.param(lambda _data: b"\x00\x17\xff garbage", "not JSON", id="garbage"),
    pytest.param(truncated, "not JSON", id="truncated"),
    pytest.param(lambda _data: KUBELET_STATE, "foreign", id="kubelet-cpu-manager-state"),
    pytest.param(bad_checksum, "checksum mismatch", id="bad-checksum"),
]


@pytest.mark.parametrize(("corrupt", "problem"), CORRUPTIONS)
async def test_corrupt_checkpoint_rebuilds_from_synchronize(
        workdir: Path, corrupt: Callable[[bytes], bytes], problem: str) -> None:
    settings = make_settings(workdir)
    exclusive, shared = await first_run(settings)
    path = Path(settings.state.checkpoint)
    path.write_bytes(corrupt(path.read_bytes()))
    with structlog.testing.capture_logs() as logs:
        async with running(settings, pods=[GOLD, BURST], containers=as_running(exclusive, shared)) as r:
            rows = assignments(r.svc)
            assert rows["gold-app"]["exclusive"] and rows["gold-app"]["cpus"] == str(exclusive)
            assert r.conn.sync_updates == []
            assert checkpoint_entries(settings)["gold-app"]["current"] == str(exclusive)  # rewritten, valid
    [warning] = events(logs, "checkpoint not used")
    assert problem in str(warning["problem"])
    repairs = [str(e["repair"]) for e in events(logs, "state repaired")]
    assert any("adopted exclusive CPUs" in m and str(exclusive) in m for m in repairs)


async def test_chunked_synchronize_sees_every_container_and_updates_only_in_the_last_reply(
        workdir: Path) -> None:
    settings = make_settings(workdir)
    topo = discover(settings.sysfs_root)
    pods = [pod(f"g{i}") for i in range(3)] + [pod("b", "burstable")]
    # nothing in the checkpoint and every container on every CPU: all need an update
    ctrs = [container(p, "app", 2000, 2000, cpus=str(topo.online)) for p in pods[:3]]
    ctrs.append(container(pods[3], "app", 100, cpus=str(topo.online)))
    async with running(settings, CONTAINERD_2_1_9, pods=pods, containers=ctrs, sync_chunk=(1, 1)) as r:
        assert len(r.conn.sync_requests) == 4
        assert [bool(reply.update) for reply in r.conn.sync_replies] == [False, False, False, True]
        rows = assignments(r.svc)
        assert set(rows) == {c.id for c in ctrs}
        pinned = [CPUSet.parse(rows[c.id]["cpus"]) for c in ctrs[:3]]
        union = CPUSet.parse(",".join(map(str, pinned)))
        assert all(len(p) == 2 for p in pinned) and len(union) == 6
        updates = cpuset_updates(r.conn.sync_updates)
        assert set(updates) == {c.id for c in ctrs}
        assert CPUSet.parse(updates[ctrs[3].id][0]) == topo.online - union


async def test_reconnect_keeps_state_and_resends_after_synchronize(workdir: Path) -> None:
    """The runtime goes away and comes back (same plugin process): state survives the reconnect."""
    settings = make_settings(workdir, nri={"reconnect_max_seconds": 0.5})
    exclusive, shared = await first_run(settings)
    svc = new_service(settings)
    async with running(settings, CONTAINERD_1_7_24, svc=svc, pods=[GOLD, BURST],
                       containers=as_running(exclusive, shared)) as r:
        await r.runtime.stop_listening()
        await r.runtime.listen(settings.nri.socket)
        conn = await r.runtime.wait_ready(10)
        assert conn.sync_updates == []
        assert assignments(svc)["gold-app"]["cpus"] == str(exclusive)
