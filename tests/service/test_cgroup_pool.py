"""Pool changes written into cgroups (README "Pool changes"), through the real stub and the fake
runtime, on a cgroup-v1 tree (cgroupfs driver layout) this test builds in tmp.

Each test checks both halves: what the cgroup files hold when the new exclusive container's
StartContainer returns, and which `ContainerUpdate`s replies still carry (only containers without
a writable cgroup). Rules that need no cgroup files (a start not waiting for later changes, every
update answered with the current cpuset, the start's wait) are tested at the core:
tests/core/test_core_cgroup_pool.py."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import cast

import pytest
from prometheus_client import generate_latest
from svc_harness import Running, container, cpuset_updates, create, make_settings, mems_for, pod, running

from nri_pinner.core import passes as core_passes
from nri_pinner.core.events import CpusetsRead, DriftCheck
from nri_pinner.core.passes import PassPlanner
from nri_pinner.core.repairs import Drift, DriftProbe
from nri_pinner.edge.app import Service
from nri_pinner.edge.cgroups import cpuset_writer
from nri_pinner.edge.cgroups import passes as cgroup_passes
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api

BPOD, GPOD = pod("burst", "burstable"), pod("gold")
B, LATE = container(BPOD, "app", 100), container(BPOD, "late", 100)
G, G2 = container(GPOD, "app", 2000, 2000), container(GPOD, "two", 2000, 2000)
G3 = container(GPOD, "three", 2000, 2000)


def cgroup_dir(root: Path, c: api.Container) -> Path:
    return root / "cpuset" / c.linux.cgroups_path.strip("/")


def start(root: Path, c: api.Container, cpus: str, mems: str) -> None:
    """What runc does at start: the container's cgroup with the cpuset it was created with
    (the pod cgroups above it keep every CPU, as the kubelet's cgroupfs driver leaves them)."""
    d = cgroup_dir(root, c)
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text(cpus + "\n")
    (d / "cpuset.mems").write_text(mems + "\n")


def held(root: Path, c: api.Container) -> tuple[CPUSet, str]:
    d = cgroup_dir(root, c)
    return CPUSet.parse((d / "cpuset.cpus").read_text()), (d / "cpuset.mems").read_text().strip()


async def start_shared(r: Running, root: Path) -> None:
    """The Burstable container B created and started, its cgroup holding every online CPU."""
    await r.conn.create_container(create(BPOD, B))
    start(root, B, str(r.topology.online), "0,1")
    await r.conn.state_change(api.START_CONTAINER, BPOD, B)


async def written(svc: Service) -> PassPlanner:
    """The core's pass book, once a pass begun at the newest change has finished (asserted, within 5 s)."""
    assert await asyncio.to_thread(svc.plugin.await_pass, 5)
    return svc.plugin.core.passes


async def shrunk_for_g(r: Running, root: Path) -> tuple[CPUSet, PassPlanner]:
    """B started, G created, and the pass for G done: (the shared pool now, the core's pass book)."""
    await start_shared(r, root)
    reply = await r.conn.create_container(create(GPOD, G))
    assert reply is not None
    return r.topology.online - CPUSet.parse(reply.adjust.linux.resources.cpu.cpus), await written(r.svc)


async def test_a_guaranteed_create_shrinks_started_containers_in_their_cgroups(workdir: Path) -> None:
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings) as r:
        online = r.topology.online
        reply = await r.conn.create_container(create(BPOD, B))
        assert reply is not None
        start(root, B, reply.adjust.linux.resources.cpu.cpus, reply.adjust.linux.resources.cpu.mems)

        await r.conn.state_change(api.START_CONTAINER, BPOD, B)
        await r.conn.create_container(create(BPOD, LATE))  # created, not started: no cgroup yet

        reply = await r.conn.create_container(create(GPOD, G))
        assert reply is not None
        exclusive = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        pool = online - exclusive
        # only LATE (no cgroup) needs the runtime; B's cgroup is written by the time G starts
        assert cpuset_updates(reply.update) == {LATE.id: (str(pool), mems_for(r.topology, pool))}
        await r.conn.state_change(api.START_CONTAINER, GPOD, G)
        assert held(root, B) == (pool, mems_for(r.topology, pool))
        writer = r.svc.plugin.writer
        assert writer is not None and writer.counts.containers == 1

        # kubelet v1.32: an exited container's CPUs stay its pod's until the pod goes (plugin.py doc)
        stopped = await r.conn.stop_container(api.StopContainerRequest(pod=GPOD, container=G))
        assert stopped is not None and stopped.update == []
        await r.conn.state_change(api.STOP_POD_SANDBOX, GPOD)
        await written(r.svc)
        assert held(root, B) == (online, "0,1")  # widened again once the pod went
        reply = await r.conn.create_container(create(BPOD, container(BPOD, "later", 100)))
        assert reply is not None and cpuset_updates(reply.update) == {LATE.id: (str(online), "0,1")}


async def test_a_pass_closes_the_cgroup_files_of_containers_that_went_away(workdir: Path) -> None:
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings) as r:
        online = r.topology.online
        await start_shared(r, root)
        await r.conn.create_container(create(BPOD, LATE))
        start(root, LATE, str(online), "0,1")
        await r.conn.state_change(api.START_CONTAINER, BPOD, LATE)
        await r.conn.create_container(create(GPOD, G))
        await r.conn.state_change(api.START_CONTAINER, GPOD, G)  # the pass narrowed B and LATE
        writer = r.svc.plugin.writer
        assert writer is not None and len(writer.files) == 2
        await r.conn.stop_container(api.StopContainerRequest(pod=BPOD, container=LATE))
        await r.conn.state_change(api.REMOVE_CONTAINER, BPOD, LATE)
        await r.conn.stop_container(api.StopContainerRequest(pod=GPOD, container=G))
        await r.conn.state_change(api.STOP_POD_SANDBOX, GPOD)  # G's CPUs stay its pod's until then
        await written(r.svc)
        assert held(root, B) == (online, "0,1") and len(writer.files) == 1  # LATE's file closed
        health = r.svc.document()["health"]
        # B and LATE narrowed for G, B widened after G's stop (a built tree has no load-balance flag); G's
        # pod quota not removed: the built tree has no cpu controller (test_pod_quota.py builds one)
        assert health["cgroup_writes"] == {"containers": 3, "writes": 3, "nested": 0, "failed": 0,
                                           "balance_cleared": 0, "unit_calls": 0, "unit_failed": 0,
                                           "pod_quotas": 0, "pod_quotas_restored": 0, "pod_quota_failed": 1,
                                           "qos_slices": 0, "qos_slice_failed": 0, "open_files": 1}
        scraped = generate_latest(r.svc.metrics.registry).decode()
        assert 'nri_pinner_cgroup_writes_total{kind="containers"} 3.0' in scraped
        assert 'nri_pinner_cgroup_writes_total{kind="failed"} 0.0' in scraped
    assert len(writer.files) == 0  # and every file at shutdown


async def test_synchronize_trusts_the_cgroup_over_the_runtimes_stale_record(workdir: Path) -> None:
    settings = make_settings(workdir, reconcile={"cgroup_writes": True})
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings) as r:
        online = r.topology.online
        await start_shared(r, root)
        reply = await r.conn.create_container(create(GPOD, G))
        assert reply is not None
        exclusive = reply.adjust.linux.resources.cpu.cpus
        start(root, G, exclusive, mems_for(r.topology, CPUSet.parse(exclusive)))
        await r.conn.state_change(api.START_CONTAINER, GPOD, G)
    pool = online - CPUSet.parse(exclusive)
    # the runtime restarts the plugin; its record of B is the create's cpuset (every CPU)
    stale_b = container(BPOD, "app", 100, cpus=str(online), mems="0,1")
    g = container(GPOD, "app", 2000, 2000, cpus=exclusive, mems=mems_for(r.topology, CPUSet.parse(exclusive)))
    async with running(settings, pods=[BPOD, GPOD], containers=[stale_b, g]) as r2:
        assert r2.conn.sync_updates == []  # the cgroups already hold the truth: nothing to send
        writer = r2.svc.plugin.writer
        assert writer is not None and writer.counts.writes == 0
        assert held(root, B) == (pool, mems_for(r2.topology, pool))


async def test_synchronize_writes_a_drifted_cgroup_instead_of_sending(workdir: Path) -> None:
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings) as r:
        online = r.topology.online
        reply = await r.conn.create_container(create(GPOD, G))
        assert reply is not None
        exclusive = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
    start(root, B, str(online), "0,1")  # B really runs on every CPU
    start(root, G, str(exclusive), mems_for(r.topology, exclusive))
    pool = online - exclusive
    b = container(BPOD, "app", 100, cpus=str(pool), mems=mems_for(r.topology, pool))  # not what runs
    g = container(GPOD, "app", 2000, 2000, cpus=str(exclusive))
    async with running(settings, pods=[BPOD, GPOD], containers=[b, g]) as r2:
        assert r2.conn.sync_updates == []
        assert held(root, B)[0] == online - exclusive


async def test_drift_repair_writes_the_cgroup_and_rechecks_what_is_desired(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings) as r:
        online = r.topology.online
        pool, _ = await shrunk_for_g(r, root)
        (cgroup_dir(root, B) / "cpuset.cpus").write_text(f"{online}\n")  # someone widened B

        async def read() -> dict[str, CPUSet]:
            probes = cast(list[DriftProbe], await asyncio.wrap_future(r.svc.plugin.ask(DriftCheck())))
            return cast(dict[str, CPUSet], await asyncio.to_thread(r.svc.reconciler._read, probes))

        async def decide(actual: dict[str, CPUSet]) -> list[tuple[Drift, str]]:
            return cast(list[tuple[Drift, str]], await asyncio.wrap_future(r.svc.plugin.ask(CpusetsRead(actual))))

        actual = await read()
        assert actual[B.id] == online
        # a second Guaranteed create lands between the cgroup read and the repair's decision, its pass
        # not begun yet (its settle stretched from 2 ms); the start, which waits for a pass, sends it
        monkeypatch.setattr(core_passes, "SETTLE_SECONDS", 3600.0)
        reply = await r.conn.create_container(create(GPOD, G2))
        assert reply is not None
        pool -= CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        decided = asyncio.ensure_future(decide(actual))  # parked until that pass
        await asyncio.sleep(0.1)
        assert not decided.done()
        await r.conn.state_change(api.START_CONTAINER, GPOD, G2)
        [(drift, path)] = await decided
        assert path == "cgroup" and (drift.actual, drift.desired) == (online, pool)
        assert held(root, B)[0] == pool  # the set desired now, not the one the probe saw
        assert r.conn.updates == []

        # a pass that writes B between the read and the decision: the read may be older than the write,
        # so it is not taken for drift (the next read decides); the pass wrote what is desired anyway
        (cgroup_dir(root, B) / "cpuset.cpus").write_text(f"{online}\n")
        actual = await read()
        monkeypatch.setattr(core_passes, "SETTLE_SECONDS", 0.002)
        reply = await r.conn.create_container(create(GPOD, G3))
        assert reply is not None and r.svc.plugin.await_pass()
        pool -= CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert held(root, B)[0] == pool
        assert await decide(actual) == []
        assert await decide(await read()) == []


async def test_create_does_not_wait_for_the_writes_but_the_exclusive_start_does(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    gate = threading.Event()
    real = cpuset_writer.OpenFiles.write

    def slow_disk(self: cpuset_writer.OpenFiles, path: str, text: str, keep: bool = True) -> None:
        assert gate.wait(10)
        real(self, path, text, keep)

    async with running(settings) as r:
        online = r.topology.online
        await start_shared(r, root)
        monkeypatch.setattr(cpuset_writer.OpenFiles, "write", slow_disk)  # each cgroup write hangs until the gate opens

        reply = await r.conn.create_container(create(GPOD, G))  # answered while the write hangs
        assert reply is not None and reply.update == []
        starting = asyncio.ensure_future(r.conn.state_change(api.START_CONTAINER, GPOD, G))
        done, _ = await asyncio.wait({starting}, timeout=0.5)
        assert not done and held(root, B)[0] == online  # G's start is held back: B still has every CPU
        gate.set()
        await starting
        pool = online - CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert held(root, B)[0] == pool


async def g_started_in_time(r: Running, root: Path) -> None:
    """B started, G created and started: when G's start returns B no longer holds G's CPUs, and the
    start did not overrun its wait."""
    await start_shared(r, root)
    reply = await r.conn.create_container(create(GPOD, G))
    assert reply is not None
    await r.conn.state_change(api.START_CONTAINER, GPOD, G)
    assert held(root, B)[0] == r.topology.online - CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
    assert r.svc.metrics.late_replies.labels("StartContainer")._value.get() == 0


async def test_a_waiting_start_does_not_wait_out_the_passes_settling(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A pass settles after a change so the runtime's own work goes first; an exclusive start that
    # waits for the pass must cut that short (with a 60 s settle, its 1 s wait would run out).
    monkeypatch.setattr(core_passes, "SETTLE_SECONDS", 60.0)
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings) as r:
        await g_started_in_time(r, root)


async def test_a_waiting_start_has_its_pass_run_at_normal_priority_when_the_background_gets_no_cpu(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # On a busy node the nice-10 background pass thread may not run for a while: a pass that a
    # StartContainer reply waits for runs on the normal-priority thread instead.
    stalled = threading.Event()
    monkeypatch.setattr(cgroup_passes, "background_priority", lambda: stalled.wait(30))
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    try:
        async with running(settings) as r:
            await g_started_in_time(r, root)
            stalled.set()  # before the service closes, which joins the pass threads
    finally:
        stalled.set()


async def test_a_pool_that_only_grows_waits_longer_and_a_start_still_cuts_it_short(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Widening is never urgent (no shared container loses a CPU), so a stop's pass waits for the
    # runtime to finish the stop; the shrink before it did not wait that long.
    monkeypatch.setattr(core_passes, "WIDEN_SETTLE_SECONDS", 60.0)
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings) as r:
        online = r.topology.online
        await start_shared(r, root)
        reply = await r.conn.create_container(create(GPOD, G))
        assert reply is not None
        exclusive = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        start(root, G, str(exclusive), "0")
        await r.conn.state_change(api.START_CONTAINER, GPOD, G)
        await written(r.svc)  # the shrink's pass is done
        assert held(root, B)[0] == online - exclusive

        await r.conn.stop_container(api.StopContainerRequest(pod=GPOD, container=G))
        await r.conn.state_change(api.STOP_POD_SANDBOX, GPOD)  # G's CPUs stay its pod's until then
        await asyncio.sleep(0.3)
        assert held(root, B)[0] == online - exclusive  # the widen is still settling
        await written(r.svc)
        assert held(root, B)[0] == online  # a waiter ends the settling at once
