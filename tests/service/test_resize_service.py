"""In-place resize through the service (README "Resize"): NRI UpdateContainer with the kubelet's
shares/quota, through the real stub and the fake runtime, on a cgroup-v1 tree built in tmp.

Dual-socket fixture: 12 CPUs, core c = {c, c+6}, CPU 0 reserved. Each test checks what the cgroup
files hold and in which order they were written (the no-window rule), what the reply carries,
and what status / metrics / the checkpoint show. The resize rules alone (grow and shrink order, a
refusal, a Burstable container, the sets across a restart) are tested at the core:
tests/core/test_core_resize_outcomes.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from svc_harness import (
    DUAL_SOCKET,
    PERIOD,
    Running,
    assignments,
    container,
    copy_sysfs,
    cpuset_updates,
    create,
    document,
    make_settings,
    mems_for,
    new_service,
    pod,
    running,
)
from test_cgroup_pool import held, start, written

from nri_pinner.cli.status import render_status
from nri_pinner.edge.app import Service
from nri_pinner.edge.cgroups import cpuset_writer
from nri_pinner.edge.request_intake import memory_policy
from nri_pinner.engine.admission_engine import Engine
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub.wire import TtrpcStatusError
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_1_9, CONTAINERD_2_3_0, RuntimeProfile
from testkit.pod_builders import resize_request as resize
from testkit.scripts import load_script

BPOD, GPOD = pod("burst", "burstable"), pod("gold")
B = container(BPOD, "app", 100)
G = container(GPOD, "app", 2000, 2000)
F = container(GPOD, "frac", 500, 500)  # Guaranteed, fractional: on the shared pool
devgen = load_script("gen_sysfs_devices")


def count(svc: Service, outcome: str, reason: str = "") -> float:
    return float(svc.metrics.resizes.labels(outcome, reason)._value.get())


async def started(r: Running, root: Path, p: api.PodSandbox, c: api.Container) -> CPUSet:
    """Create and start `c` (its cgroup holds what the create answered); returns its cpuset."""
    reply = await r.conn.create_container(create(p, c))
    assert reply is not None
    cpus = reply.adjust.linux.resources.cpu.cpus
    start(root, c, cpus, reply.adjust.linux.resources.cpu.mems)
    await r.conn.state_change(api.START_CONTAINER, p, c)
    return CPUSet.parse(cpus)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every cgroup cpuset.cpus write, in order: (container directory name, cpus)."""
    log: list[tuple[str, str]] = []
    real = cpuset_writer.OpenFiles.write

    def recording(self: cpuset_writer.OpenFiles, path: str, text: str, keep: bool = True) -> None:
        real(self, path, text, keep)
        if path.endswith("cpuset.cpus"):
            log.append((Path(path).parent.name, text.strip()))

    monkeypatch.setattr(cpuset_writer.OpenFiles, "write", recording)
    return log


async def test_shared_to_exclusive_and_back_narrows_the_neighbours_first(
        workdir: Path, writes: list[tuple[str, str]]) -> None:
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings) as r:
        online = r.topology.online
        assert await started(r, root, GPOD, F) == online  # created first: the pass still writes B first
        await started(r, root, BPOD, B)
        writes.clear()

        reply = await r.conn.update_container(resize(F, GPOD, 2000))
        assert reply is not None
        mine = CPUSet.parse(cpuset_updates(reply.update)[F.id][0])
        assert len(mine) == 2 and 0 not in mine
        pool = online - mine
        # answered only once both cgroups were written, the neighbour's first
        assert held(root, B)[0] == pool and held(root, F)[0] == mine
        assert writes == [(B.id, str(pool)), (F.id, str(mine))]
        doc = assignments(r.svc)[F.id]
        assert (doc["exclusive"], doc["cpus"], doc["admitted"]) == (True, str(mine), str(mine))
        assert doc["resize"]["outcome"] == "to-exclusive" and doc["resize"]["before"] == str(online)
        assert count(r.svc, "to-exclusive") == 1

        writes.clear()
        reply = await r.conn.update_container(resize(F, GPOD, 500))  # back to fractional
        assert reply is not None and cpuset_updates(reply.update)[F.id][0] == str(online)
        await written(r.svc)
        assert held(root, B)[0] == online and held(root, F)[0] == online
        assert assignments(r.svc)[F.id]["resize"]["released"] == str(mine)
        assert count(r.svc, "to-shared") == 1


# every refusal reason: tests/core/test_core_resize_outcomes.py
@pytest.mark.parametrize(("milli", "reason"), [(12000, "InsufficientCPUs")])
async def test_a_refused_resize_fails_the_update_and_keeps_everything(
        workdir: Path, writes: list[tuple[str, str]], milli: int, reason: str) -> None:
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings) as r:
        online = r.topology.online
        await started(r, root, BPOD, B)
        mine = await started(r, root, GPOD, G)
        await written(r.svc)
        writes.clear()
        with pytest.raises(TtrpcStatusError, match=rf"resize of 'app' to {milli}m/{milli}m refused: {reason}"):
            await r.conn.update_container(resize(G, GPOD, milli))
        assert r.conn.peer is not None and not r.conn.peer.closed  # a refusal, not a dropped plugin
        doc = assignments(r.svc)[G.id]
        assert doc["cpus"] == str(mine) and doc["resize"]["outcome"] == "refused"
        assert doc["resize"]["reason"] == reason and doc["resize"]["after"] == str(mine)
        assert count(r.svc, "refused", reason) == 1
        text = render_status(document(r.svc))
        assert f"gold/app: refused {mine} -> {mine} (admitted {mine}, {milli}m/{milli}m) {reason}: " in text
        assert held(root, B)[0] == online - mine and writes == []
        # the kubelet's retry with the old values is answered as usual
        reply = await r.conn.update_container(resize(G, GPOD, 2000))
        assert reply is not None and cpuset_updates(reply.update)[G.id][0] == str(mine)


@pytest.mark.parametrize("profile", [CONTAINERD_1_7_24, CONTAINERD_2_3_0])
async def test_update_pod_sandbox_only_where_the_runtime_has_it(
        workdir: Path, profile: RuntimeProfile, capsys: pytest.CaptureFixture[str]) -> None:
    """NRI v0.12 (containerd 2.3) sends UpdatePodSandbox; older runtimes never subscribe us to it.
    In pod scope a pod grow the node cannot give is reported; the containers' updates decide."""
    settings = make_settings(workdir, topology_manager={"scope": "pod"})
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings, profile) as r:
        mine = await started(r, root, GPOD, G)
        req = api.UpdatePodSandboxRequest(pod=GPOD)
        req.linux_resources.cpu.quota.value, req.linux_resources.cpu.period.value = 12 * PERIOD, PERIOD
        answer = await r.conn.update_pod_sandbox(req)
        if profile is CONTAINERD_1_7_24:
            assert answer is None and "UpdatePodSandbox" not in r.conn.calls
            return
        assert answer == api.UpdatePodSandboxResponse()
        assert "pod resize cannot get its exclusive CPUs" in capsys.readouterr().out
        req.linux_resources.cpu.quota.value = 3 * PERIOD  # one more CPU: fits
        assert await r.conn.update_pod_sandbox(req) == api.UpdatePodSandboxResponse()
        out = capsys.readouterr().out
        assert "pod resized" in out and "cannot get" not in out
        assert assignments(r.svc)[G.id]["cpus"] == str(mine)  # nothing moves before the container's update


@pytest.mark.parametrize("policy", ["single-numa-node", "best-effort"])
async def test_a_memory_aligned_grow_stays_on_its_memory_node_or_is_refused(workdir: Path, policy: str) -> None:
    """Memory Manager on (README "Resize": memory): a Guaranteed container's memory blocks are not
    moved by a resize. single-numa-node refuses a grow past the node its CPUs and memory share;
    best-effort grows past it and cpuset.mems stays the memory's node."""
    settings = make_settings(workdir, topology_manager={"policy": policy},
                             hints={"providers": ["cpu", "memory"]}, memory_manager={"reserved_memory": "0:memory=1Gi"})
    topo = discover(settings.sysfs_root)
    svc = new_service(settings, Engine.from_settings(settings, topo, memory=memory_policy(settings, topo)))
    root = Path(settings.reconcile.cgroup_root)
    c = container(GPOD, "app", 2000, 2000)
    c.linux.resources.memory.limit.value = 1 << 30
    async with running(settings, svc=svc) as r:
        mine = await started(r, root, GPOD, c)
        [node] = topo.numa_of(mine)
        mems = str(node)
        reply = await r.conn.update_container(resize(c, GPOD, 4000))
        assert reply is not None
        grown, grown_mems = cpuset_updates(reply.update)[c.id]
        assert mine.issubset(CPUSet.parse(grown)) and topo.numa_of(CPUSet.parse(grown)) == [node]
        assert grown_mems == mems
        free_there = len(topo.numa_cpus[node] - CPUSet.parse(grown) - svc.plugin.node.engine.policy.reserved)
        beyond = (4 + free_there + 1) * 1000  # one CPU more than the node has left
        if policy == "single-numa-node":
            with pytest.raises(TtrpcStatusError, match="TopologyAffinityError"):
                await r.conn.update_container(resize(c, GPOD, beyond))
            assert assignments(r.svc)[c.id]["cpus"] == grown
        else:
            reply = await r.conn.update_container(resize(c, GPOD, beyond))
            assert reply is not None
            cpus, cpu_mems = cpuset_updates(reply.update)[c.id]
            assert len(topo.numa_of(CPUSet.parse(cpus))) == 2 and cpu_mems == mems  # the memory did not move


async def test_an_update_over_budget_gets_the_current_cpuset_and_the_late_resize_still_lands(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings(workdir, nri={"budget_margin_ms": 400})
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings, CONTAINERD_2_1_9, request_timeout=1.0) as r:  # budget 0.6 s
        online = r.topology.online
        await started(r, root, BPOD, B)
        mine = await started(r, root, GPOD, G)
        engine = r.svc.plugin.node.engine
        real = engine.resize

        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(1.0)  # a blocked decision: past the budget, inside the runtime's timeout
            return real(*args, **kwargs)

        monkeypatch.setattr(engine, "resize", slow)
        reply = await r.conn.update_container(resize(G, GPOD, 4000))
        assert reply is not None and not r.conn.closed
        assert cpuset_updates(reply.update) == {G.id: (str(mine), mems_for(r.topology, mine))}
        assert r.svc.metrics.registry.get_sample_value(
            "nri_pinner_late_handler_replies_total", {"method": "UpdateContainer"}) == 1
        async with asyncio.timeout(5):
            while len(CPUSet.parse(assignments(r.svc)[G.id]["cpus"])) != 4:
                await asyncio.sleep(0.01)
        grown = CPUSet.parse(assignments(r.svc)[G.id]["cpus"])
        await written(r.svc)
        assert held(root, G)[0] == grown and held(root, B)[0] == online - grown


@pytest.mark.parametrize("policy", ["single-numa-node", "best-effort"])
async def test_fractional_to_integer_follows_its_memory(workdir: Path, policy: str) -> None:
    """A fractional Guaranteed container holds Memory Manager blocks too (here on node 1: node 0's
    memory is taken). Its resize to integer CPUs is admitted with those blocks (README "Resize":
    memory): the CPUs come from node 1 and the blocks stay as they are. With node 1's CPUs all
    taken, single-numa-node refuses (naming memory) and best-effort takes node 0, mems staying 1."""
    settings = make_settings(workdir, topology_manager={"policy": policy},
                             hints={"providers": ["cpu", "memory"]}, memory_manager={"reserved_memory": "0:memory=1Gi"})
    topo = discover(settings.sysfs_root)
    svc = new_service(settings, Engine.from_settings(settings, topo, memory=memory_policy(settings, topo)))
    root = Path(settings.reconcile.cgroup_root)
    big, frac = container(GPOD, "big", 2000, 2000), container(GPOD, "frac", 500, 500)
    big.linux.resources.memory.limit.value, frac.linux.resources.memory.limit.value = 6 << 30, 2 << 30
    async with running(settings, svc=svc) as r:
        await started(r, root, GPOD, big)
        shared = await started(r, root, GPOD, frac)
        engine = svc.plugin.node.engine
        assert engine.memory_mems(svc.plugin.node.state, GPOD.uid, "big") == (0,)
        assert engine.memory_mems(svc.plugin.node.state, GPOD.uid, "frac") == (1,)
        blocks = svc.plugin.node.state.to_dict()["providers"]["memory"]
        reply = await r.conn.update_container(resize(frac, GPOD, 2000))
        assert reply is not None
        cpus, mems = cpuset_updates(reply.update)[frac.id]
        assert topo.numa_of(CPUSet.parse(cpus)) == [1] and mems == "1"
        assert svc.plugin.node.state.to_dict()["providers"]["memory"] == blocks  # nothing allocated twice
        reply = await r.conn.update_container(resize(frac, GPOD, 500))  # back to the shared pool
        assert reply is not None and cpuset_updates(reply.update)[frac.id][0] == str(shared)
        free = len(topo.numa_cpus[1] - engine.policy.reserved)
        fill = container(GPOD, "fill", free * 1000, free * 1000)  # node 1's CPUs, no memory
        assert topo.numa_of(await started(r, root, GPOD, fill)) == [1]
        if policy == "single-numa-node":
            with pytest.raises(TtrpcStatusError, match=r"TopologyAffinityError: .*cannot be satisfied: cpu "
                               r"\(conflicts with memory"):
                await r.conn.update_container(resize(frac, GPOD, 2000))
            doc = assignments(r.svc)[frac.id]
            assert (doc["exclusive"], doc["cpus"], doc["resize"]["reason"]) == (False, str(shared - CPUSet.parse(
                assignments(r.svc)[fill.id]["cpus"])), "TopologyAffinityError")
            assert count(r.svc, "refused", "TopologyAffinityError") == 1
        else:
            reply = await r.conn.update_container(resize(frac, GPOD, 2000))
            assert reply is not None
            cpus, mems = cpuset_updates(reply.update)[frac.id]
            assert topo.numa_of(CPUSet.parse(cpus)) == [0] and mems == "1"  # the memory did not move
        assert svc.plugin.node.state.to_dict()["providers"]["memory"] == blocks


@pytest.mark.parametrize("node1_full", [False, True])
async def test_fractional_to_integer_aligns_with_the_containers_gpu(workdir: Path, node1_full: bool) -> None:
    """The update carries the container (its linux.devices): fractional -> integer under
    single-numa-node is admitted as a create with that GPU is -- node-1 CPUs, or refused naming
    the devices provider when node 1 has no room. (A CPU-only admission would pick node 0.)"""
    sysfs = copy_sysfs(DUAL_SOCKET, workdir / "sysfs")
    devgen.gpu_box(sysfs)  # GPU char 195:1 on NUMA node 1
    settings = make_settings(workdir, sysfs=sysfs, topology_manager={"policy": "single-numa-node"},
                             hints={"providers": ["cpu", "devices"]})
    root = Path(settings.reconcile.cgroup_root)
    frac = container(GPOD, "cuda", 500, 500)
    frac.linux.devices.append(api.LinuxDevice(path="/dev/nvidia1", type="c", major=195, minor=1))
    async with running(settings) as r:
        topo = r.topology
        if node1_full:
            free = len(topo.numa_cpus[1] - r.svc.plugin.node.engine.policy.reserved)
            other = pod("other")
            assert topo.numa_of(await started(r, root, other, container(other, "x", free * 1000, free * 1000))) == [1]
        shared = await started(r, root, GPOD, frac)
        if node1_full:
            with pytest.raises(TtrpcStatusError, match=r"TopologyAffinityError: .*cannot be satisfied: cpu "
                               r"\(conflicts with devices\[nvidia\]\)"):
                await r.conn.update_container(resize(frac, GPOD, 2000))
            assert assignments(r.svc)[frac.id]["cpus"] == str(shared)
            return
        reply = await r.conn.update_container(resize(frac, GPOD, 2000))
        assert reply is not None
        cpus, mems = cpuset_updates(reply.update)[frac.id]
        assert topo.numa_of(CPUSet.parse(cpus)) == [1] and mems == "1"
        assert assignments(r.svc)[frac.id]["admitted"] == cpus
