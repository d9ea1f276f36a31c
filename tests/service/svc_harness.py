"""Service test harness: NRI messages shaped like the kubelet + containerd send them, and a
Service wired to the in-process fake runtime through the real stub.

Messages follow what containerd puts into NRI for a kubelet pod: the pod's cgroup parent per QoS
class (cgroupfs `/kubepods[/burstable|/besteffort]/pod<uid>`), cpu shares from the request
(kubelet MilliCPUToShares), quota/period from the limit, `linux.cgroups_path` below the parent.
Nothing marks an init container (the kubelet writes no container type); `container(..., init=True)`
adds nri-pinner's documented plain-containerd override instead (PLAIN_CONTAINERD_TYPE, README).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nri_pinner.config import Settings, from_mapping
from nri_pinner.engine.admission import Engine
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import Topology
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.service import checkpoint_file
from nri_pinner.service.app import Service, build_engine
from testkit.fake_runtime import CONTAINERD_1_7_24, FakeRuntime, PluginConnection, RuntimeProfile, running_stub

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
DUAL_SOCKET = FIXTURES / "dual-socket-ht"  # 12 CPUs, 2 NUMA nodes, core c = {c, c+6}
PERIOD = 100_000
# NOT a kubelet field: the container annotation a plain containerd client sets to mark an init container
# (README "How Kubernetes intent is read"; nri_pinner/service/core/intent.py CONTAINER_TYPE_OVERRIDE)
PLAIN_CONTAINERD_TYPE = "io.kubernetes.container.type"


# ------------------------------------------------------------------------------------------- messages

def pod(name: str, qos: str = "guaranteed", *, uid: str | None = None, namespace: str = "default",
        annotations: Mapping[str, str] | None = None) -> api.PodSandbox:
    uid = uid or f"uid-{name}"
    parent = {"guaranteed": f"/kubepods/pod{uid}", "burstable": f"/kubepods/burstable/pod{uid}",
              "besteffort": f"/kubepods/besteffort/pod{uid}"}[qos]
    p = api.PodSandbox(id=f"sb-{name}", name=name, uid=uid, namespace=namespace, annotations=annotations or {})
    p.linux.cgroup_parent = parent
    return p


def container(sandbox: api.PodSandbox, name: str, request_milli: int = 0, limit_milli: int = 0, *,
              init: bool = False, cid: str | None = None, cpus: str = "", mems: str = "",
              state: int = api.CONTAINER_RUNNING) -> api.Container:
    """A container as containerd reports it; `cpus`/`mems` are its current cpuset (Synchronize). ``init``:
    marked with the plain-containerd override (the kubelet itself marks none)."""
    cid = cid or f"{sandbox.name}-{name}"
    c = api.Container(id=cid, pod_sandbox_id=sandbox.id, name=name, state=state)  # type: ignore[arg-type]
    if init:
        c.annotations[PLAIN_CONTAINERD_TYPE] = "init"
    cpu = c.linux.resources.cpu
    cpu.shares.value = max(2, request_milli * 1024 // 1000)  # kubelet MilliCPUToShares
    if limit_milli:
        cpu.quota.value = limit_milli * PERIOD // 1000
        cpu.period.value = PERIOD
    if cpus:
        cpu.cpus = cpus
    if mems:
        cpu.mems = mems
    c.linux.cgroups_path = f"{sandbox.linux.cgroup_parent}/{cid}"
    return c


def create(sandbox: api.PodSandbox, c: api.Container) -> api.CreateContainerRequest:
    return api.CreateContainerRequest(pod=sandbox, container=c)


def cpuset_updates(updates: Iterable[api.ContainerUpdate]) -> dict[str, tuple[str, str]]:
    """container id -> (cpus, mems) of each update, as the runtime decoded them."""
    out = {}
    for u in updates:
        assert u.container_id not in out, f"two updates for {u.container_id} in one reply"
        out[u.container_id] = (u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems)
    return out


def mems_for(topology: Topology, cpus: CPUSet) -> str:
    """The NUMA nodes holding `cpus`, as cpuset.mems text (computed from sysfs, not from the engine)."""
    return ",".join(str(n) for n in topology.numa_nodes if topology.numa_cpus[n] & cpus)


_SERVICES: weakref.WeakValueDictionary[str, Service] = weakref.WeakValueDictionary()


def close_services() -> None:
    """Stop the node thread and the writers of every service the harness made (test teardown)."""
    for svc in list(_SERVICES.values()):
        svc.node_thread.stop()
        svc.plugin.close()
    _SERVICES.clear()


def checkpoint_entries(settings: Settings) -> dict[str, dict[str, Any]]:
    """The checkpoint file, once the service writing it has written everything it was given."""
    svc = _SERVICES.get(settings.state.checkpoint)
    if svc is not None:
        assert svc.plugin.checkpoints.flush(), "checkpoint writer stuck"
    loaded = checkpoint_file.read(settings.state.checkpoint)
    assert loaded.body is not None, loaded.problem
    return {e["container_id"]: e for e in loaded.body["entries"]}


def document(svc: Service) -> dict[str, Any]:
    """The status document (what `nri-pinner status` shows), typed for indexing."""
    return svc.document()


def assignments(svc: Service) -> dict[str, dict[str, Any]]:
    return {a["container_id"]: a for a in document(svc)["assignments"]}


# ------------------------------------------------------------------------------------------- settings

def make_settings(workdir: Path, *, sysfs: Path = DUAL_SOCKET, options: Mapping[str, Mapping[str, Any]] | None = None,
                  **sections: Mapping[str, Any]) -> Settings:
    """Settings with every path inside `workdir` (short: unix socket paths are limited to 107 bytes);
    `options` and `sections` override config tables key by key."""
    data: dict[str, Any] = {
        "sysfs_root": str(sysfs),
        "cpu_manager": {"reserved_cpus": "0"},
        "nri": {"socket": str(workdir / "nri.sock")},
        "state": {"checkpoint": str(workdir / "cp.json")},
        "inspect": {"socket": str(workdir / "inspect.sock")},
        "reconcile": {"period_seconds": 0, "cri_socket": "", "cgroup_root": str(workdir / "cgroup")},
    }
    for name, values in [*(options or {}).items(), *sections.items()]:
        data[name] = {**data.get(name, {}), **values}
    return from_mapping(data, "<test>")


def new_service(settings: Settings, engine: Engine | None = None) -> Service:
    """A service the harness knows (``checkpoint_entries`` flushes its writer first)."""
    nics = None
    if engine is None:  # as `nri-pinner run` builds it: every provider hints.providers names
        engine, nics = build_engine(settings, discover(settings.sysfs_root))
    svc = _SERVICES[settings.state.checkpoint] = Service(settings, engine, env={}, nics=nics)
    return svc


def copy_sysfs(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    return dest


@dataclass
class Running:
    svc: Service
    runtime: FakeRuntime
    conn: PluginConnection

    @property
    def topology(self) -> Topology:
        return self.svc.plugin.node.engine.topology


@contextlib.asynccontextmanager
async def running(settings: Settings, profile: RuntimeProfile = CONTAINERD_1_7_24, *,
                  svc: Service | None = None, **runtime_options: Any) -> AsyncIterator[Running]:
    """A Service connected to a fake runtime and synchronized; stops both on exit.

    The fake runtime's exit check fails the test if an unsolicited UpdateContainers reached a
    runtime whose NRI can deadlock on it.
    """
    svc = svc or new_service(settings)
    async with FakeRuntime(profile, **runtime_options) as runtime:
        await runtime.listen(settings.nri.socket)
        try:
            async with running_stub(svc.stub):
                conn = await runtime.wait_ready()
                yield Running(svc, runtime, conn)
        finally:
            await asyncio.to_thread(svc.plugin.close)  # as Service.run does on its way out


# ------------------------------------------------------------------------------------------- cgroups

def write_cgroup_cpus(cgroup_root: Path, c: api.Container, cpus: str) -> None:
    """cgroup v1 layout: <root>/cpuset/<cgroups_path>/cpuset.cpus."""
    d = cgroup_root / "cpuset" / c.linux.cgroups_path.strip("/")
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpuset.cpus").write_text(cpus + "\n")
