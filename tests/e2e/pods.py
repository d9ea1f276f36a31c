"""Kubelet-like pod operations over CRI: sandbox + containers with the kubelet's resources and labels."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import kubelet_model as km
from . import node_env
from .cri_client import CriClient
from .procfs import catches_signal, memory_capacity_bytes

BUSYBOX_IMAGE = "e2e.local/busybox:1"
# busybox sh as pid 1 ignores SIGTERM unless it traps it; `wait` keeps the trap responsive.
WORKLOAD = ("sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait")
DEFAULT_GUARANTEED_MEMORY = 64 * 1024 * 1024


@dataclass
class PodHandle:
    name: str
    namespace: str
    uid: str
    qos: km.QOSClass
    cgroup_parent: str
    log_directory: Path
    sandbox_id: str
    sandbox_config: Any
    containers: dict[str, str] = field(default_factory=dict)  # container name -> id, creation order

    @property
    def container_ids(self) -> list[str]:
        return list(self.containers.values())


def resources_for(
    qos: km.QOSClass | str,
    cpu_milli_request: int,
    cpu_milli_limit: int,
    memory_request: int | None,
    memory_limit: int | None,
) -> km.ContainerResources:
    """Container resources for the wanted QoS; raises ValueError if the numbers give another class."""
    qos = km.QOSClass(qos)
    if qos is km.QOSClass.GUARANTEED:
        memory_limit = memory_limit if memory_limit is not None else DEFAULT_GUARANTEED_MEMORY
        memory_request = memory_request if memory_request is not None else memory_limit
    res = km.ContainerResources(cpu_milli_request, cpu_milli_limit, memory_request or 0, memory_limit or 0)
    actual = km.qos_class([res])
    if actual is not qos:
        raise ValueError(f"resources {res} make a {actual.value} pod, not {qos.value}")
    return res


def run_pod(
    cri: CriClient,
    pods_dir: Path,
    record_cgroup: Callable[[str], None],
    qos: km.QOSClass | str,
    cpu_milli_request: int = 0,
    cpu_milli_limit: int = 0,
    *,
    memory_request: int | None = None,
    memory_limit: int | None = None,
    containers: int = 1,
    name: str | None = None,
    namespace: str = "default",
    image: str = BUSYBOX_IMAGE,
    command: Sequence[str] = WORKLOAD,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    start: bool = True,
) -> PodHandle:
    """RunPodSandbox + ``containers`` identical containers (c0, c1, ...), created and started in order."""
    if containers < 0:
        raise ValueError(f"containers must be >= 0, got {containers}")
    res = resources_for(qos, cpu_milli_request, cpu_milli_limit, memory_request, memory_limit)
    qos_cls = km.QOSClass(qos)
    uid = str(uuid.uuid4())
    name = name or f"e2e-{qos_cls.value}-{uid[:8]}"
    parent = km.cgroup_parent(qos_cls, uid, node_env.CGROUP_DRIVER)
    log_dir = pods_dir / f"{namespace}_{name}_{uid}"
    log_dir.mkdir(parents=True, exist_ok=True)
    config = cri.pod_sandbox_config(
        name=name,
        namespace=namespace,
        uid=uid,
        cgroup_parent=parent,
        log_directory=log_dir,
        resources=km.pod_linux_resources([res] * max(containers, 1)),
        labels=km.pod_labels(name, namespace, uid, dict(labels or {})),
        annotations=annotations,
    )
    record_cgroup(parent)  # runc creates it; nobody else removes it after the pod
    pod = PodHandle(name, namespace, uid, qos_cls, parent, log_dir, cri.run_pod_sandbox(config), config)
    for i in range(containers):
        add_container(cri, pod, f"c{i}", res, image=image, command=command, start=start)
    return pod


def add_container(
    cri: CriClient,
    pod: PodHandle,
    name: str,
    resources: km.ContainerResources,
    *,
    init: bool = False,
    image: str = BUSYBOX_IMAGE,
    command: Sequence[str] = WORKLOAD,
    start: bool = True,
    annotations: Mapping[str, str] | None = None,
    devices: Sequence[tuple[str, str, str]] = (),
) -> str:
    """CreateContainer (+ StartContainer) as the kubelet sends it; ``init`` sets the init-container
    annotation (io.kubernetes.container.type=init) the kubelet uses; ``annotations`` adds more."""
    if name in pod.containers:
        raise ValueError(f"pod {pod.name} already has a container named {name!r}")
    (pod.log_directory / name).mkdir(exist_ok=True)
    cid = cri.create_container(
        pod.sandbox_id,
        pod.sandbox_config,
        name=name,
        image=image,
        command=command,
        resources=km.container_linux_resources(resources, pod.qos, memory_capacity_bytes()),
        labels=km.container_labels(pod.name, pod.namespace, pod.uid, name),
        annotations={**km.container_annotations(name, init=init), **(annotations or {})},
        log_path=f"{name}/0.log",
        devices=devices,
    )
    pod.containers[name] = cid
    if start:
        cri.start_container(cid)
        if tuple(command) == WORKLOAD:
            _wait_term_trap(cri, cid)
    return cid


def _wait_term_trap(cri: CriClient, container_id: str, timeout: float = 5.0) -> None:
    """Wait until the workload's shell has installed its TERM trap: a SIGTERM that arrives before is
    ignored by pid 1, and StopContainer then takes its whole timeout."""
    timeout = node_env.scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        state, info = cri.container_status(container_id)
        pid = int(info.get("pid", 0))
        if state != "RUNNING":
            raise RuntimeError(f"container {container_id[:12]} is {state} right after StartContainer")
        try:
            if pid > 0 and catches_signal(pid, signal.SIGTERM):
                return
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"container {container_id[:12]} (pid {pid}) installed no TERM trap in {timeout}s")
        time.sleep(0.01)


def remove_pod(cri: CriClient, pod: PodHandle, stop_timeout_s: int = 10) -> None:
    """The kubelet's teardown order: stop each container, remove it once its status says EXITED, then
    stop + remove the sandbox."""
    for cid in pod.container_ids:
        cri.stop_and_remove(cid, stop_timeout_s)
    pod.containers.clear()
    cri.stop_pod_sandbox(pod.sandbox_id)
    cri.remove_pod_sandbox(pod.sandbox_id)
