"""Plugins and helpers shared by the stub tests (imported like vectors.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub import Stub

NRI_PLUGINS_MASK = 0x6AF  # RunPod, StopPod, RemovePod, Create, Start, Update, Stop, RemoveContainer


@contextlib.contextmanager
def short_socket_path() -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="nri-", dir="/tmp")  # short: unix socket paths max 107 bytes
    try:
        yield os.path.join(directory, "nri.sock")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def pods(n: int) -> list[api.PodSandbox]:
    return [api.PodSandbox(id=f"pod{i}", name=f"p{i}", namespace="default") for i in range(n)]


def containers(n: int) -> list[api.Container]:
    return [api.Container(id=f"ctr{i}", pod_sandbox_id=f"pod{i}", name=f"c{i}") for i in range(n)]


def cpus_adjustment(cpus: str) -> api.CreateContainerResponse:
    response = api.CreateContainerResponse()
    response.adjust.linux.resources.cpu.cpus = cpus
    return response


class Recorder:
    """Plugin handling the nri-plugins event set; records what reaches it (on the handler thread)."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []
        self.sync_calls: list[tuple[list[str], list[str]]] = []

    def synchronize(self, pods: list[api.PodSandbox], ctrs: list[api.Container]) -> list[api.ContainerUpdate]:
        self.sync_calls.append(([p.id for p in pods], [c.id for c in ctrs]))
        return [api.ContainerUpdate(container_id="ctr0")]

    def create_container(self, req: api.CreateContainerRequest) -> api.CreateContainerResponse:
        self.seen.append(("create", req.container.id))
        return cpus_adjustment("1")

    async def update_container(self, req: api.UpdateContainerRequest) -> None:
        self.seen.append(("update", req.container.id))

    def stop_container(self, req: api.StopContainerRequest) -> api.StopContainerResponse:
        self.seen.append(("stop", req.container.id))
        return api.StopContainerResponse(update=[api.ContainerUpdate(container_id="other")])

    def run_pod_sandbox(self, event: api.StateChangeEvent) -> None:
        self.seen.append(("run_pod", event.pod.id))

    def stop_pod_sandbox(self, event: api.StateChangeEvent) -> None:
        self.seen.append(("stop_pod", event.pod.id))

    def remove_pod_sandbox(self, event: api.StateChangeEvent) -> None:
        self.seen.append(("remove_pod", event.pod.id))

    def start_container(self, event: api.StateChangeEvent) -> None:
        self.seen.append(("start", event.container.id))

    def remove_container(self, event: api.StateChangeEvent) -> None:
        self.seen.append(("remove", event.container.id))


class WideRecorder(Recorder):
    """Also handles an NRI v0.10+ event (UpdatePodSandbox, bit 0x800)."""

    def update_pod_sandbox(self, req: api.UpdatePodSandboxRequest) -> None:
        self.seen.append(("update_pod", req.pod.id))


def make_stub(plugin: object, path: str, **kwargs: Any) -> Stub:
    options: dict[str, Any] = {"backoff_initial": 0.02, "backoff_max": 0.1, "env": {}}
    options.update(kwargs)
    return Stub(plugin, name="test", idx="42", socket_path=path, **options)
