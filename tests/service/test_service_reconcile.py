"""Drift repair by the reconcile timer, on each path the runtime's NRI version allows, and CPU
hotplug on a fake sysfs tree. The cgroup tree is a fake cgroup-v1 root in tmp.

Drift is checked in started containers only (tests/service/test_reconcile_unstarted.py). The tests
here turn direct cgroup writes off (`NO_WRITES`) to exercise the runtime paths a repair takes when a
cgroup cannot be written (with writes on, a started container's drift is rewritten in its cgroup:
tests/service/test_cgroup_pool.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from svc_harness import (
    DUAL_SOCKET,
    Running,
    assignments,
    container,
    copy_sysfs,
    cpuset_updates,
    create,
    document,
    make_settings,
    mems_for,
    pod,
    running,
    write_cgroup_cpus,
)

from nri_pinner.config import Settings
from nri_pinner.edge.gen import cri_repair_pb2 as cri
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_1_9, NRI_V0_12_1, RuntimeProfile

BPOD, GPOD = pod("burst", "burstable"), pod("gold")
NO_WRITES = {"cgroup_writes": False}
B, G = container(BPOD, "app", 100), container(GPOD, "app", 2000, 2000)


def repairs(r: Running, path: str) -> float:
    value = r.svc.metrics.registry.get_sample_value("nri_pinner_reconcile_repairs_total", {"path": path})
    return 0.0 if value is None else value


async def start_two_containers(r: Running, cgroup_root: Path) -> CPUSet:
    """A burstable and a guaranteed container, started, whose cgroups hold what they were told; returns
    G's CPUs."""
    await r.conn.create_container(create(BPOD, B))
    reply = await r.conn.create_container(create(GPOD, G))
    assert reply is not None
    exclusive = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
    write_cgroup_cpus(cgroup_root, G, str(exclusive))  # runc create, before the runtime's StartContainer
    write_cgroup_cpus(cgroup_root, B, str(r.topology.online - exclusive))
    for p, c in ((BPOD, B), (GPOD, G)):
        assert await r.conn.state_change(api.START_CONTAINER, p, c)
    assert await r.svc.reconciler.tick() == []  # in sync: nothing to repair
    return exclusive


@pytest.mark.parametrize("profile", [CONTAINERD_1_7_24, CONTAINERD_2_1_9], ids=lambda p: p.label)
async def test_without_cri_the_repair_rides_on_the_next_reply(workdir: Path, profile: RuntimeProfile) -> None:
    settings = make_settings(workdir, reconcile=NO_WRITES)
    cgroups = Path(settings.reconcile.cgroup_root)
    async with running(settings, profile, forbid_unsolicited_updates=True) as r:
        exclusive = await start_two_containers(r, cgroups)
        write_cgroup_cpus(cgroups, G, str(r.topology.online))  # someone widened G's cpuset

        [drift] = await r.svc.reconciler.tick()
        assert (drift.container_id, drift.actual, drift.desired) == (G.id, r.topology.online, exclusive)
        assert r.conn.updates == [] and r.conn.forbidden_updates == []  # no UpdateContainers on old NRI
        assert repairs(r, "next-reply") == 1

        reply = await r.conn.create_container(create(BPOD, container(BPOD, "later", 100)))
        assert reply is not None
        assert cpuset_updates(reply.update) == {G.id: (str(exclusive), mems_for(r.topology, exclusive))}
        assert document(r.svc)["health"]["reconcile_repairs"] == 1


@dataclass
class FakeCRI:
    """runtime.v1.RuntimeService/UpdateContainerResources that, like containerd, relays the change
    to NRI plugins as an UpdateContainer before it answers."""

    relay: Callable[[cri.UpdateContainerResourcesRequest], Any]
    requests: list[cri.UpdateContainerResourcesRequest] = field(default_factory=list)
    nri_replies: list[api.UpdateContainerResponse] = field(default_factory=list)

    async def update(self, request: cri.UpdateContainerResourcesRequest,
                     _context: grpc.aio.ServicerContext[Any, Any]) -> cri.UpdateContainerResourcesResponse:
        self.requests.append(request)
        self.nri_replies.append(await self.relay(request))
        return cri.UpdateContainerResourcesResponse()


async def serve_cri(path: str, fake: FakeCRI) -> grpc.aio.Server:
    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(
        fake.update, request_deserializer=cri.UpdateContainerResourcesRequest.FromString,
        response_serializer=cri.UpdateContainerResourcesResponse.SerializeToString)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "runtime.v1.RuntimeService", {"UpdateContainerResources": handler})])
    server.add_insecure_port(f"unix:{path}")
    await server.start()
    return server


def nri_update_from_cri(request: cri.UpdateContainerResourcesRequest) -> api.UpdateContainerRequest:
    """The UpdateContainer containerd sends plugins for a CRI update of G: fromCRILinuxResources
    (containerd/internal/nri) sets shares, quota, period and memory limit even when CRI left them 0."""
    nri = api.UpdateContainerRequest(pod=GPOD, container=G)
    linux, cpu = request.linux, nri.linux_resources.cpu
    cpu.shares.value, cpu.quota.value, cpu.period.value = linux.cpu_shares, linux.cpu_quota, linux.cpu_period
    cpu.cpus, cpu.mems = linux.cpuset_cpus, linux.cpuset_mems
    nri.linux_resources.memory.limit.value = linux.memory_limit_in_bytes
    return nri


@pytest.fixture
async def cri_runtime(workdir: Path) -> AsyncIterator[tuple[Settings, Running, FakeCRI]]:
    settings = make_settings(workdir, reconcile={"cri_socket": str(workdir / "cri.sock"), **NO_WRITES})
    async with running(settings, CONTAINERD_1_7_24, forbid_unsolicited_updates=True) as r:

        async def relay(request: cri.UpdateContainerResourcesRequest) -> api.UpdateContainerResponse:
            reply = await r.conn.update_container(nri_update_from_cri(request))
            assert reply is not None
            return reply

        fake = FakeCRI(relay)
        server = await serve_cri(settings.reconcile.cri_socket, fake)
        try:
            yield settings, r, fake
        finally:
            assert r.svc.reconciler.cri is not None
            await r.svc.reconciler.cri.close()
            await server.stop(None)


async def test_with_cri_the_repair_uses_update_container_resources(
        cri_runtime: tuple[Settings, Running, FakeCRI]) -> None:
    settings, r, fake = cri_runtime
    cgroups = Path(settings.reconcile.cgroup_root)
    exclusive = await start_two_containers(r, cgroups)
    write_cgroup_cpus(cgroups, G, str(r.topology.online))

    [drift] = await r.svc.reconciler.tick()
    assert drift.container_id == G.id
    [request] = fake.requests
    assert request.container_id == G.id
    assert {f.name for f, _ in request.linux.ListFields()} == {"cpuset_cpus", "cpuset_mems"}  # nothing else
    assert (request.linux.cpuset_cpus, request.linux.cpuset_mems) == (str(exclusive), mems_for(r.topology, exclusive))
    # the NRI UpdateContainer that CRI call caused is answered with the container's current cpuset
    assert [cpuset_updates(reply.update) for reply in fake.nri_replies] == [
        {G.id: (str(exclusive), mems_for(r.topology, exclusive))}]
    assert r.conn.updates == [] and r.conn.forbidden_updates == []
    assert repairs(r, "cri") == 1

    write_cgroup_cpus(cgroups, G, str(exclusive))  # the runtime applied it
    assert await r.svc.reconciler.tick() == []
    # nothing is pending either: the next reply carries no update
    reply = await r.conn.create_container(create(BPOD, container(BPOD, "later", 100)))
    assert reply is not None and reply.update == []


async def test_someone_elses_cpuset_only_cri_update_is_undone(cri_runtime: tuple[Settings, Running, FakeCRI]) -> None:
    settings, r, _fake = cri_runtime
    exclusive = await start_two_containers(r, Path(settings.reconcile.cgroup_root))
    foreign = nri_update_from_cri(cri.UpdateContainerResourcesRequest(
        container_id=G.id, linux=cri.LinuxContainerResources(cpuset_cpus=str(r.topology.online))))
    reply = await r.conn.update_container(foreign)
    assert reply is not None
    assert cpuset_updates(reply.update) == {G.id: (str(exclusive), mems_for(r.topology, exclusive))}


async def test_nri_v0_12_1_repairs_with_update_containers(workdir: Path) -> None:
    settings = make_settings(workdir, reconcile=NO_WRITES)
    cgroups = Path(settings.reconcile.cgroup_root)
    async with running(settings, NRI_V0_12_1) as r:
        exclusive = await start_two_containers(r, cgroups)
        write_cgroup_cpus(cgroups, G, str(r.topology.online))
        [drift] = await r.svc.reconciler.tick()
        assert drift.container_id == G.id
        [request] = r.conn.updates
        assert cpuset_updates(request.update) == {G.id: (str(exclusive), mems_for(r.topology, exclusive))}
        assert repairs(r, "nri") == 1


def set_online(sysfs: Path, online: CPUSet) -> None:
    cpu = sysfs / "sys/devices/system/cpu"
    possible = CPUSet.parse((cpu / "possible").read_text())
    (cpu / "online").write_text(f"{online}\n")
    (cpu / "offline").write_text(f"{possible - online}\n")


async def apply_updates(r: Running, cgroups: Path, by_id: dict[str, api.Container]) -> dict[str, str]:
    """What the runtime received through UpdateContainers since the last call, applied to the cgroups."""
    got: dict[str, str] = {}
    for request in r.conn.updates:
        for cid, (cpus, _mems) in cpuset_updates(request.update).items():
            write_cgroup_cpus(cgroups, by_id[cid], cpus)
            got[cid] = cpus
    r.conn.updates.clear()
    return got


async def test_cpu_hotplug_shrinks_and_regrows_pools_and_exclusive_sets(workdir: Path) -> None:
    sysfs = copy_sysfs(DUAL_SOCKET, workdir / "sysfs")
    settings = make_settings(workdir, sysfs=sysfs, reconcile=NO_WRITES)
    cgroups = Path(settings.reconcile.cgroup_root)
    async with running(settings, NRI_V0_12_1) as r:
        online = r.topology.online
        exclusive = await start_two_containers(r, cgroups)
        lost_exclusive = exclusive.min()
        lost_shared = max(online - exclusive)
        set_online(sysfs, online - CPUSet([lost_exclusive, lost_shared]))

        drifts = await r.svc.reconciler.tick()
        assert {d.container_id for d in drifts} == {B.id, G.id}
        got = await apply_updates(r, cgroups, {B.id: B, G.id: G})
        shrunk = exclusive - CPUSet([lost_exclusive])
        assert got == {G.id: str(shrunk), B.id: str(online - exclusive - CPUSet([lost_shared]))}
        doc = document(r.svc)
        assert doc["pools"]["offline"] == str(CPUSet([lost_exclusive, lost_shared]))
        assert assignments(r.svc)[G.id]["cpus"] == str(shrunk)

        set_online(sysfs, online)  # both CPUs come back
        drifts = await r.svc.reconciler.tick()
        assert {d.container_id for d in drifts} == {B.id, G.id}
        got = await apply_updates(r, cgroups, {B.id: B, G.id: G})
        assert got == {G.id: str(exclusive), B.id: str(online - exclusive)}
        assert document(r.svc)["pools"]["shared"] == str(online - exclusive)
        assert await r.svc.reconciler.tick() == []


async def test_cpu_hotplug_keeps_the_engines_hint_providers(workdir: Path) -> None:
    # The engine is rebuilt on the new topology: with "nics" enabled it must keep the NIC provider
    # (it used to be rebuilt from the settings alone and refuse: "enabled but not wired up").
    sysfs = copy_sysfs(DUAL_SOCKET, workdir / "sysfs")
    settings = make_settings(workdir, sysfs=sysfs, hints={"providers": ["cpu", "nics"]})
    async with running(settings, NRI_V0_12_1) as r:
        online = r.topology.online
        set_online(sysfs, online - CPUSet([max(online)]))
        await r.svc.reconciler.tick()
        engine = r.svc.plugin.node.engine
        assert engine.topology.online == online - CPUSet([max(online)])
        assert [p.name for p in engine.extra_providers] == ["nics"]


async def test_failed_update_containers_falls_back_to_the_next_reply(workdir: Path) -> None:
    settings = make_settings(workdir, reconcile=NO_WRITES)
    cgroups = Path(settings.reconcile.cgroup_root)
    async with running(settings, NRI_V0_12_1, failing_update_ids=[G.id]) as r:
        exclusive = await start_two_containers(r, cgroups)
        write_cgroup_cpus(cgroups, G, str(r.topology.online))
        await r.svc.reconciler.tick()
        assert len(r.conn.updates) == 1  # tried, and the runtime reported it failed
        assert (repairs(r, "nri"), repairs(r, "next-reply")) == (0, 1)
        reply = await r.conn.create_container(create(BPOD, container(BPOD, "later", 100)))
        assert reply is not None
        assert cpuset_updates(reply.update) == {G.id: (str(exclusive), mems_for(r.topology, exclusive))}


async def test_unreachable_cri_falls_back_to_the_next_reply(workdir: Path) -> None:
    settings = make_settings(workdir, reconcile={"cri_socket": str(workdir / "no-cri.sock"), **NO_WRITES})
    cgroups = Path(settings.reconcile.cgroup_root)
    async with running(settings, CONTAINERD_1_7_24, forbid_unsolicited_updates=True) as r:
        try:
            exclusive = await start_two_containers(r, cgroups)
            write_cgroup_cpus(cgroups, G, str(r.topology.online))
            await r.svc.reconciler.tick()
            assert (repairs(r, "cri"), repairs(r, "next-reply")) == (0, 1)
            reply = await r.conn.create_container(create(BPOD, container(BPOD, "later", 100)))
            assert reply is not None
            assert cpuset_updates(reply.update) == {G.id: (str(exclusive), mems_for(r.topology, exclusive))}
        finally:
            assert r.svc.reconciler.cri is not None
            await r.svc.reconciler.cri.close()


async def test_reserved_cpu_going_offline_does_not_stop_reconciling(workdir: Path) -> None:
    sysfs = copy_sysfs(DUAL_SOCKET, workdir / "sysfs")
    settings = make_settings(workdir, sysfs=sysfs, cpu_manager={"reserved_cpus": "0,1"}, reconcile=NO_WRITES)
    cgroups = Path(settings.reconcile.cgroup_root)
    async with running(settings, NRI_V0_12_1) as r:
        online = r.topology.online
        exclusive = await start_two_containers(r, cgroups)
        set_online(sysfs, online - CPUSet([1]))
        await r.svc.reconciler.tick()
        pools = document(r.svc)["pools"]
        assert (pools["reserved"], pools["offline"]) == ("0", "1")
        assert await apply_updates(r, cgroups, {B.id: B, G.id: G}) == {B.id: str(online - exclusive - CPUSet([1]))}

        set_online(sysfs, online)
        await r.svc.reconciler.tick()
        assert document(r.svc)["pools"]["reserved"] == "0-1"
        assert await apply_updates(r, cgroups, {B.id: B, G.id: G}) == {B.id: str(online - exclusive)}
