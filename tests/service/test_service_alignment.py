"""Device and memory alignment through the service, over the fake runtime and the real stub.

The sysfs tree is the committed dual-socket fixture (CPUs 0,2,..,10 on node 0, odd ones on
node 1) plus PCI devices written by scripts/gen_sysfs_devices.py: GPU char devices 195:0
(node 0) and 195:1 (node 1), an NVMe, a VFIO group and a no-affinity GPU (195:2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from svc_harness import (
    DUAL_SOCKET,
    checkpoint_entries,
    container,
    copy_sysfs,
    create,
    make_settings,
    new_service,
    pod,
    running,
)

from nri_pinner.cli.status import render_status
from nri_pinner.edge.app import Service
from nri_pinner.edge.request_intake import Intake, memory_policy, page_size_bytes
from nri_pinner.engine.admission_engine import Engine
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.memorymanager.provider import memory_state
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub.wire import TtrpcStatusError
from testkit.fake_runtime import CONTAINERD_2_3_0
from testkit.scripts import load_script

GB = 1 << 30




devgen = load_script("gen_sysfs_devices")


@pytest.fixture
def sysfs(workdir: Path) -> Path:
    root = copy_sysfs(DUAL_SOCKET, workdir / "sysfs")
    devgen.gpu_box(root)
    return root


def settings_for(workdir: Path, sysfs: Path, policy: str = "single-numa-node") -> Any:
    return make_settings(workdir, sysfs=sysfs, topology_manager={"policy": policy},
                         hints={"providers": ["cpu", "devices", "memory"]},
                         memory_manager={"reserved_memory": "0:memory=1Gi"})


def service(settings: Any) -> Service:
    topo = discover(settings.sysfs_root)
    return new_service(settings, Engine.from_settings(settings, topo, memory=memory_policy(settings, topo)))


def with_gpu(c: api.Container, minor: int, *, memory: int = 0, cdi: str = "") -> api.Container:
    c.linux.devices.append(api.LinuxDevice(path=f"/dev/nvidia{minor}", type="c", major=195, minor=minor))
    if memory:
        c.linux.resources.memory.limit.value = memory
    if cdi:
        c.CDI_devices.append(api.CDIDevice(name=cdi))
    return c


async def test_gpu_container_lands_on_the_gpus_node_with_memory_there(workdir: Path, sysfs: Path) -> None:
    settings = settings_for(workdir, sysfs)
    svc = service(settings)
    async with running(settings, CONTAINERD_2_3_0, svc=svc) as r:
        gp = pod("train")
        c = with_gpu(container(gp, "cuda", 2000, 2000), 1, memory=2 * GB, cdi="nvidia.com/gpu=1")
        reply = await r.conn.create_container(create(gp, c))
        assert reply is not None
        cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(cpus) == 2 and cpus & r.topology.numa_cpus[1] == cpus
        assert reply.adjust.linux.resources.cpu.mems == "1"

        doc: dict[str, Any] = svc.document()
        [a] = [a for a in doc["assignments"] if a["container"] == "cuda"]
        assert a["mems"] == "1"
        assert a["hints"]["merged"] == {"numa": [1], "preferred": True}
        assert a["hints"]["provider_hints"]["devices"] == {"nvidia.com/gpu": "{1} {0,1}~"}
        assert "memory" in a["hints"]["provider_hints"]
        text = render_status(doc)
        assert "train/cuda: merged {1} | cpu {0} {1} {0,1}~ | devices[nvidia.com/gpu] {1} {0,1}~" in text

        entry = checkpoint_entries(settings)[c.id]
        assert entry["memory_blocks"] == [{"numa": [1], "type": "memory", "size": 2 * GB}]
        metrics = generate_latest(svc.metrics.registry).decode()
        assert 'nri_pinner_provider_admissions_total{provider="devices"} 1.0' in metrics

        # node 1 has 6 CPUs, 2 taken: a 5-CPU container with the same GPU cannot be aligned
        big = with_gpu(container(gp, "big", 5000, 5000), 1)
        with pytest.raises(TtrpcStatusError, match=r"TopologyAffinityError.*cannot be satisfied: cpu"):
            await r.conn.create_container(create(gp, big))
        metrics = generate_latest(svc.metrics.registry).decode()
        assert 'nri_pinner_provider_rejections_total{provider="cpu"} 1.0' in metrics

        # the pod's going releases the memory (a stop alone keeps it for the pod, as the kubelet does)
        await r.conn.stop_container(api.StopContainerRequest(pod=gp, container=c))
        assert svc.plugin.node.engine.memory_mems(svc.plugin.node.state, gp.uid, "cuda") == (1,)
        await r.conn.state_change(api.STOP_POD_SANDBOX, gp)
        assert svc.plugin.node.engine.memory_mems(svc.plugin.node.state, gp.uid, "cuda") is None


async def test_memory_blocks_survive_a_restart_through_the_checkpoint(workdir: Path, sysfs: Path) -> None:
    settings = settings_for(workdir, sysfs)
    gp = pod("train")
    c = with_gpu(container(gp, "cuda", 2000, 2000), 0, memory=GB)
    async with running(settings, CONTAINERD_2_3_0, svc=service(settings)) as r:
        reply = await r.conn.create_container(create(gp, c))
        assert reply is not None and reply.adjust.linux.resources.cpu.mems == "0"
        c.linux.resources.cpu.cpus = reply.adjust.linux.resources.cpu.cpus
        c.linux.resources.cpu.mems = "0"
    svc = service(settings)
    async with running(settings, CONTAINERD_2_3_0, svc=svc, pods=[gp], containers=[c]) as r:
        assert svc.plugin.node.engine.memory_mems(svc.plugin.node.state, gp.uid, "cuda") == (0,)


def test_intake_groups_devices_and_warns_once_for_missing_nodes(sysfs: Path, workdir: Path) -> None:
    warnings: list[dict[str, Any]] = []
    intake = Intake(settings_for(workdir, sysfs), warn=lambda msg, **kw: warnings.append({"msg": msg, **kw}))
    gp = pod("x")
    c = container(gp, "c", 1000, 1000)
    for path, kind, major, minor in [("/dev/nvidia0", "c", 195, 0), ("/dev/nvme0n1", "b", 259, 0),
                                     ("/dev/vfio/12", "c", 511, 0), ("/dev/null", "c", 1, 3),
                                     ("/dev/ghost", "c", 99, 9)]:
        c.linux.devices.append(api.LinuxDevice(path=path, type=kind, major=major, minor=minor))
    c.env.append("PCIDEVICE_INTEL_COM_SRIOV=0000:18:02.1")
    got = intake.devices(c)
    assert {r: [(d.id, sorted(d.numa or ())) for d in ds] for r, ds in got.items()} == {
        "nvidia": [("c195:0", [0])], "nvme": [("b259:0", [1])], "intel_com_sriov": [("vfio:12", [0])]}
    intake.devices(c)
    assert [w["path"] for w in warnings] == ["/dev/ghost"]  # once, not per create


def test_intake_memory_for_guaranteed_only(sysfs: Path, workdir: Path) -> None:
    intake = Intake(settings_for(workdir, sysfs))
    c = container(pod("x"), "c", 1000, 1000)
    c.linux.resources.memory.limit.value = GB
    c.linux.resources.hugepage_limits.append(api.HugepageLimit(page_size="2MB", limit=64 << 20))
    assert intake.memory(c, True) == {"memory": GB, "hugepages-2Mi": 64 << 20}
    assert intake.memory(c, False) == {}
    assert page_size_bytes("1GB") == GB
    with pytest.raises(ValueError, match="unknown hugepage size"):
        page_size_bytes("2XB")


@pytest.mark.parametrize("cpu_milli", [1000, 500], ids=["exclusive-cpus", "shared-cpus"])
async def test_app_container_reuses_its_init_containers_memory(workdir: Path, sysfs: Path, cpu_milli: int) -> None:
    """Nodes have 7-8 GiB allocatable: after a 6 GiB init container, a 5 GiB app container fits on
    the init's node (where its reusable CPU is, so single-numa-node needs that node) only because it
    reuses the exited init container's memory (kubelet Memory Manager rule); the checkpoint keeps
    the shrunk init block, removal frees everything. With fractional CPUs (shared pool) the init
    container still holds Memory Manager blocks, kept after it exits (the kubelet releases memory at
    removal, not at exit)."""
    settings = settings_for(workdir, sysfs)
    svc = service(settings)
    async with running(settings, CONTAINERD_2_3_0, svc=svc) as r:
        gp = pod("job")
        init = container(gp, "setup", cpu_milli, cpu_milli, init=True)
        init.linux.resources.memory.limit.value = 6 * GB
        reply = await r.conn.create_container(create(gp, init))
        assert reply is not None
        node = reply.adjust.linux.resources.cpu.mems
        await r.conn.stop_container(api.StopContainerRequest(pod=gp, container=init))
        assert checkpoint_entries(settings)[init.id]["memory_blocks"][0]["size"] == 6 * GB

        app = container(gp, "main", cpu_milli, cpu_milli)
        app.linux.resources.memory.limit.value = 5 * GB
        reply = await r.conn.create_container(create(gp, app))
        assert reply is not None and reply.adjust.linux.resources.cpu.mems == node
        entries = checkpoint_entries(settings)
        assert entries[init.id]["memory_blocks"] == [{"numa": [int(node)], "type": "memory", "size": GB}]
        assert entries[app.id]["memory_blocks"] == [{"numa": [int(node)], "type": "memory", "size": 5 * GB}]

        memory = svc.plugin.node.engine.memory
        assert memory is not None
        for c in (init, app):
            assert await r.conn.state_change(api.REMOVE_CONTAINER, gp, c)
        state = memory_state(svc.plugin.node.state.providers["memory"])
        assert state.blocks == {} and memory.machine(state)[int(node)].tables["memory"].reserved == 0
