"""Service test harness: NRI messages shaped like the kubelet + containerd send them, and a
Service wired to the in-process fake runtime through the real stub.

The messages (pods, containers, requests) are built by testkit/pod_builders.py, shared with the core
tests (tests/core/core_harness.py).
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
from nri_pinner.edge.app import Service, build_engine
from nri_pinner.edge.checkpoint import file as checkpoint_file
from nri_pinner.engine.admission_engine import Engine
from nri_pinner.engine.topology.model import Topology
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api
from testkit.fake_runtime import CONTAINERD_1_7_24, FakeRuntime, PluginConnection, RuntimeProfile, running_stub
from testkit.pod_builders import PERIOD, PLAIN_CONTAINERD_TYPE, container, exited, kubelet_container, mems_for, pod
from testkit.pod_builders import create_request as create

__all__ = ["PERIOD", "PLAIN_CONTAINERD_TYPE", "container", "create", "exited", "kubelet_container", "mems_for", "pod"]

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
DUAL_SOCKET = FIXTURES / "dual-socket-ht"  # 12 CPUs, 2 NUMA nodes, core c = {c, c+6}


# ------------------------------------------------------------------------------------------- messages

def cpuset_updates(updates: Iterable[api.ContainerUpdate]) -> dict[str, tuple[str, str]]:
    """container id -> (cpus, mems) of each update, as the runtime decoded them."""
    out = {}
    for u in updates:
        assert u.container_id not in out, f"two updates for {u.container_id} in one reply"
        out[u.container_id] = (u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems)
    return out


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
