"""The PodResources provider through the service: fake runtime (real NRI wire, real stub) + fake kubelet
(real gRPC on a unix socket). The sysfs tree is the dual-socket fixture with the GPU box of
scripts/gen_sysfs_devices.py (GPU char devices 195:0 on node 0, 195:1 on node 1).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from svc_harness import DUAL_SOCKET, container, copy_sysfs, create, make_settings, new_service, pod, running

from nri_pinner.cli.status import render_status
from nri_pinner.edge.app import Service
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub.wire import TtrpcStatusError
from testkit.fake_kubelet import FakeKubelet
from testkit.fake_runtime import CONTAINERD_2_3_0
from testkit.scripts import load_script

devgen = load_script("gen_sysfs_devices")
GPU = "nvidia.com/gpu"


@pytest.fixture
def sysfs(workdir: Path) -> Path:
    root = copy_sysfs(DUAL_SOCKET, workdir / "sysfs")
    devgen.gpu_box(root)
    return root


@pytest.fixture
def kubelet(workdir: Path) -> Iterator[FakeKubelet]:
    k = FakeKubelet(str(workdir / "kubelet.sock"))
    k.allocatable = [(GPU, ["GPU-0"], [0]), (GPU, ["GPU-1"], [1])]
    with k:
        yield k


def settings_for(workdir: Path, sysfs: Path, kubelet: FakeKubelet, scope: str = "container") -> Any:
    return make_settings(workdir, sysfs=sysfs, topology_manager={"policy": "single-numa-node", "scope": scope},
                         hints={"providers": ["cpu", "devices", "podresources"]},
                         podresources={"socket": kubelet.socket_path, "refresh_seconds": 3600})


def kubelet_container(sandbox: api.PodSandbox, name: str, milli: int, gpu_minor: int | None = None) -> api.Container:
    """With the labels the kubelet puts on every container, and (optionally) its GPU's device node."""
    c = container(sandbox, name, milli, milli)
    c.labels.update({"io.kubernetes.pod.namespace": sandbox.namespace, "io.kubernetes.pod.name": sandbox.name,
                     "io.kubernetes.pod.uid": sandbox.uid, "io.kubernetes.container.name": name})
    if gpu_minor is not None:
        c.linux.devices.append(api.LinuxDevice(path=f"/dev/nvidia{gpu_minor}", type="c", major=195,
                                               minor=gpu_minor))
    return c


async def listed_after_sandbox(svc: Service, r: Any, kubelet: FakeKubelet, sandbox: api.PodSandbox) -> None:
    calls = kubelet.calls["List"]
    assert await r.conn.state_change(api.RUN_POD_SANDBOX, sandbox)
    assert await asyncio.to_thread(kubelet.wait_calls, "List", calls + 1)
    assert svc.podresources is not None
    while svc.podresources.view.pod(sandbox.namespace, sandbox.name) is None:  # swapped in after the call
        await asyncio.sleep(0.01)


async def test_kubelet_devices_align_the_container_and_show_in_status(workdir: Path, sysfs: Path,
                                                                      kubelet: FakeKubelet) -> None:
    settings = settings_for(workdir, sysfs, kubelet)
    svc = new_service(settings)
    assert svc.podresources is not None
    svc.podresources.start()  # as Service.run does
    metrics = generate_latest(svc.metrics.registry).decode()
    assert 'nri_pinner_provider_rejections_total{provider="podresources"} 0.0' in metrics
    try:
        async with running(settings, CONTAINERD_2_3_0, svc=svc) as r:
            gp = pod("train")
            kubelet.set_pod("default", "train", {"cuda": [(GPU, ["GPU-1"], [1])]})
            await listed_after_sandbox(svc, r, kubelet, gp)
            reply = await r.conn.create_container(create(gp, kubelet_container(gp, "cuda", 2000, gpu_minor=1)))
            assert reply is not None
            cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
            assert len(cpus) == 2 and cpus & r.topology.numa_cpus[1] == cpus

            doc: dict[str, Any] = svc.document()
            [a] = [a for a in doc["assignments"] if a["container"] == "cuda"]
            assert a["hints"]["merged"] == {"numa": [1], "preferred": True}
            # the GPU the kubelet reports is counted by podresources only, not again by sysfs ("nvidia")
            assert a["hints"]["provider_hints"]["podresources"] == {GPU: "{1} {0,1}~"}
            assert "devices" not in a["hints"]["provider_hints"]
            assert "podresources[nvidia.com/gpu] {1} {0,1}~" in render_status(doc)
            metrics = generate_latest(svc.metrics.registry).decode()
            assert 'nri_pinner_provider_admissions_total{provider="podresources"} 1.0' in metrics

            # a second pod's container holding GPUs on both nodes cannot be aligned
            wide = pod("wide")
            kubelet.set_pod("default", "wide", {"app": [(GPU, ["GPU-0"], [0]), (GPU, ["GPU-1"], [1])]})
            await listed_after_sandbox(svc, r, kubelet, wide)
            with pytest.raises(TtrpcStatusError, match=r"TopologyAffinityError.*cannot be satisfied: podresources"):
                await r.conn.create_container(create(wide, kubelet_container(wide, "app", 1000)))
            metrics = generate_latest(svc.metrics.registry).decode()
            assert 'nri_pinner_provider_rejections_total{provider="podresources"} 1.0' in metrics

            # a create the List has not caught up with: no PodResources hint, counted; sysfs still sees the GPU
            kubelet.delay["List"] = 2.0  # far longer than one create takes
            late = pod("late")
            kubelet.set_pod("default", "late", {"app": [(GPU, ["GPU-0"], [0])]})
            assert await r.conn.state_change(api.RUN_POD_SANDBOX, late)
            reply = await r.conn.create_container(create(late, kubelet_container(late, "app", 1000, gpu_minor=0)))
            assert reply is not None
            later: dict[str, Any] = svc.document()
            [a] = [a for a in later["assignments"] if a["container"] == "app" and a["pod"] == "late"]
            assert "podresources" not in a["hints"]["provider_hints"]
            assert a["hints"]["provider_hints"]["devices"] == {"nvidia": "{0} {0,1}~"}
            metrics = generate_latest(svc.metrics.registry).decode()
            assert 'nri_pinner_podresources_misses_total{reason="pending"} 1.0' in metrics
    finally:
        await asyncio.to_thread(svc.podresources.close)


async def test_pod_scope_aligns_the_pod_on_all_its_containers_devices(workdir: Path, sysfs: Path,
                                                                      kubelet: FakeKubelet) -> None:
    settings = settings_for(workdir, sysfs, kubelet, scope="pod")
    svc = new_service(settings)
    assert svc.podresources is not None
    svc.podresources.start()
    try:
        async with running(settings, CONTAINERD_2_3_0, svc=svc) as r:
            gp = pod("duo")
            gp.linux.pod_resources.cpu.quota.value = 200_000  # pod-level limit: 2 CPUs
            gp.linux.pod_resources.cpu.period.value = 100_000
            # the first container holds no device; its sibling's GPU (node 1) decides the pod's node
            kubelet.set_pod("default", "duo", {"first": [], "second": [(GPU, ["GPU-1"], [1])]})
            await listed_after_sandbox(svc, r, kubelet, gp)
            reply = await r.conn.create_container(create(gp, kubelet_container(gp, "first", 1000)))
            assert reply is not None
            cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
            assert len(cpus) == 1 and cpus & r.topology.numa_cpus[1] == cpus
    finally:
        await asyncio.to_thread(svc.podresources.close)


async def test_service_run_starts_and_stops_the_fetcher(workdir: Path, sysfs: Path, kubelet: FakeKubelet) -> None:
    settings = settings_for(workdir, sysfs, kubelet)
    svc = new_service(settings)
    task = asyncio.create_task(svc.run())  # no runtime listening: the stub retries while the fetcher works
    assert await asyncio.to_thread(kubelet.wait_calls, "GetAllocatableResources", 1)
    assert await asyncio.to_thread(kubelet.wait_calls, "List", 1)
    assert svc.podresources is not None and svc.podresources.available
    for _ in range(100):  # the view is swapped in just after the List answer
        if svc.podresources.listed_at is not None:
            break
        await asyncio.sleep(0.02)
    doc: Any = svc.document()["podresources"]
    assert doc["available"] is True and doc["socket"] == kubelet.socket_path and doc["listed_at"]
    assert doc["allocatable"] == {GPU: 2} and doc["pods"] == 0
    assert f"{GPU}=2" in render_status(svc.document()) and "connected; last List" in render_status(svc.document())
    await svc.stub.stop()
    assert await asyncio.wait_for(task, 10) == 0
    thread = svc.podresources._thread
    assert thread is not None and not thread.is_alive()
