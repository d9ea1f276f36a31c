"""Kubelet-built pods over CRI: every request is what the kubelet v1.32 sends (kubelet_pod.py) in the
kubelet's order (kubelet_sync.py). Nothing here marks a container as an init container: the kubelet
does not; ``init``/``restartable`` only shape the pod spec the requests are computed from."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc

from . import kubelet_model as km
from . import kubelet_pod as kp
from . import kubelet_sync as ks
from . import node_env
from .cri_client import CriClient
from .procfs import catches_signal

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
    sandbox_config: Any  # the PodSandboxConfig message RunPodSandbox sent (CreateContainer repeats it)
    spec: kp.Pod
    node: km.Node
    containers: dict[str, str] = field(default_factory=dict)  # container name -> newest id, creation order
    instances: list[tuple[str, str]] = field(default_factory=list)  # (name, id) of every instance, oldest first
    restart_counts: dict[str, int] = field(default_factory=dict)  # name -> restart count of the newest instance

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


def run_sandbox(
    cri: CriClient,
    pods_dir: Path,
    record_cgroup: Callable[[str], None],
    spec: kp.Pod,
    sandbox_spec: kp.Pod | None = None,
) -> PodHandle:
    """RunPodSandbox for ``spec`` (``sandbox_spec``: the spec the sandbox is computed from, when the caller
    adds containers the sandbox could not know of); the pod log directory is made first, as
    kuberuntime_sandbox.go:49-55 does."""
    node = node_env.kubelet_node(pods_dir)
    sandbox_spec = sandbox_spec or spec
    request = kp.sandbox_config(sandbox_spec, node)
    log_dir = Path(request["log_directory"])
    log_dir.mkdir(parents=True, exist_ok=True)
    parent = request["linux"]["cgroup_parent"]
    record_cgroup(parent)  # runc creates it; nobody else removes it after the pod
    config = cri.message("PodSandboxConfig", request)
    sandbox_id = cri.run_pod_sandbox(config)
    return PodHandle(spec.name, spec.namespace, spec.uid, sandbox_spec.qos, parent, log_dir, sandbox_id, config, spec,
                     node)


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
    """A pod of ``containers`` identical app containers (c0, c1, ...), created and started in order. With
    ``containers=0`` the caller adds them (add_container); the sandbox is then computed as for one such
    container."""
    if containers < 0:
        raise ValueError(f"containers must be >= 0, got {containers}")
    res = resources_for(qos, cpu_milli_request, cpu_milli_limit, memory_request, memory_limit)
    uid = str(uuid.uuid4())
    ctrs = tuple(kp.Container(f"c{i}", res, image, tuple(command)) for i in range(max(containers, 1)))
    spec = kp.Pod(name or f"e2e-{km.QOSClass(qos).value}-{uid[:8]}", namespace, uid, ctrs,
                  labels=dict(labels or {}), annotations=dict(annotations or {}))
    pod = run_sandbox(cri, pods_dir, record_cgroup, replace(spec, containers=ctrs[:containers]), spec)
    for c in pod.spec.containers:
        add_container(cri, pod, c.name, res, image=image, command=command, start=start)
    return pod


def start_pod(
    cri: CriClient,
    pods_dir: Path,
    record_cgroup: Callable[[str], None],
    spec: kp.Pod,
    *,
    pleg_seconds: float = ks.PLEG_RELIST_SECONDS,
    after: Callable[[ks.Call, str], None] | None = None,
) -> PodHandle:
    """The kubelet's start of a new pod (kubelet_sync.start_calls): sandbox, init containers one after
    another (a regular one must exit 0, a sidecar must run), then the app containers. ``pleg_seconds``:
    how long after the awaited change the next container comes (the kubelet's PLEG relist period).
    ``after(call, container_id)`` runs after each call (after a create once its start has returned too:
    add_container makes both)."""
    pod = run_sandbox(cri, pods_dir, record_cgroup, spec)
    calls = ks.start_calls(spec)
    if after:
        after(calls[0], "")
    for create, start in zip(calls[1::2], calls[2::2], strict=True):  # kubelet_sync: each create with its start
        c = spec.container(create.container)
        cid = add_container(cri, pod, c.name, c.resources, init=spec.is_init(c.name), restartable=c.restartable,
                            image=c.image, command=c.command)
        if after:
            after(create, cid)
            after(start, cid)
        if start.wait == "exited":
            _wait_exit_zero(cri, cid)
        if start.wait:
            time.sleep(pleg_seconds)
    return pod


def add_container(
    cri: CriClient,
    pod: PodHandle,
    name: str,
    resources: km.ContainerResources,
    *,
    init: bool = False,
    restartable: bool = False,
    image: str = BUSYBOX_IMAGE,
    command: Sequence[str] = WORKLOAD,
    start: bool = True,
    annotations: Mapping[str, str] | None = None,
    devices: Sequence[tuple[str, str, str]] = (),
) -> str:
    """CreateContainer (+ StartContainer) as the kubelet sends it (kubelet_pod.container_config). A name the
    pod's spec lacks joins it: an init container with ``init`` (``restartable``: a sidecar), else an app
    container; the request is the same either way but for what the spec changes (a sidecar's oom_score_adj).
    ``annotations`` and ``devices`` stand for what device plugins give the kubelet."""
    if name in pod.containers:
        raise ValueError(f"pod {pod.name} already has a container named {name!r}")
    add_to_spec(pod, kp.Container(name, resources, image, tuple(command), restartable=restartable), init=init)
    cid = send_create(cri, pod, name, container_request(cri, pod, name, 0, annotations, devices), 0)
    pod.containers[name] = cid
    if start:
        try:
            cri.start_container(cid)
        except grpc.RpcError as exc:
            if not runc_device_race(exc):
                raise
            # runc's own race with systemd over the scope's device program (runc create: its
            # SetUnitProperties makes systemd re-attach its program while runc replaces it). Not the
            # plugin's: 0 in 150 creates beside 35 SetUnitProperties/s on other scopes, in the guest.
            # The kubelet restarts a container whose start failed; so does the harness, and says so.
            RUNC_DEVICE_RACES.append(f"{pod.name}/{name}")
            print(f"e2e: runc device-program race starting {pod.name}/{name}; restarted as the kubelet does")
            return restart_container(cri, pod, name)
        if tuple(command) == WORKLOAD:
            _wait_term_trap(cri, cid)
    return cid


RUNC_DEVICE_RACES: list[str] = []  # containers restarted after runc's device-program race (figures)


def runc_device_race(exc: grpc.RpcError) -> bool:
    details = str(exc.details()) if hasattr(exc, "details") else str(exc)
    return "BPF_PROG_ATTACH (BPF_CGROUP_DEVICE" in details and "no such file or directory" in details


def restart_container(cri: CriClient, pod: PodHandle, name: str) -> str:
    """The kubelet starting a container of a running pod again (kubelet_sync.restart_calls): the old
    instance must have exited; the new one is attempt restartCount + 1, logging to <name>/<n>.log."""
    old = pod.containers[name]
    if cri.container_state(old) != "EXITED":
        raise RuntimeError(f"{pod.name}/{name} has not exited: the kubelet restarts only exited containers")
    exited = [cid for n, cid in pod.instances if n == name]
    count = pod.restart_counts[name] + 1
    for call in ks.restart_calls(pod.spec, name, count, len(exited)):
        if call.method == "RemoveContainer":
            cid = exited.pop(0)
            cri.remove_container(cid)
            pod.instances.remove((name, cid))
        elif call.method == "CreateContainer":
            send_create(cri, pod, name, container_request(cri, pod, name, count), count)
        else:
            c = pod.spec.container(name)
            cri.start_container(pod.containers[name])
            if c.command == WORKLOAD:
                _wait_term_trap(cri, pod.containers[name])
    return pod.containers[name]


def resize_container(cri: CriClient, pod: PodHandle, name: str, new: km.ContainerResources) -> None:
    """UpdateContainerResources of an in-place resize (kubelet_pod.resize_resources)."""
    cri.update_container_resources(pod.containers[name], **kp.resize_resources(pod.spec, name, new, pod.node))


def add_to_spec(pod: PodHandle, c: kp.Container, *, init: bool = False) -> None:
    """The container joins the pod's spec (unless it is there already): an init container with ``init``."""
    if c.restartable and not init:
        raise ValueError("a restartable container is an init container")
    try:
        pod.spec.container(c.name)
    except KeyError:
        spec = pod.spec
        if init:
            pod.spec = replace(spec, init_containers=(*spec.init_containers, c))
        else:
            pod.spec = replace(spec, containers=(*spec.containers, c))


def container_request(
    cri: CriClient,
    pod: PodHandle,
    name: str,
    restart_count: int = 0,
    annotations: Mapping[str, str] | None = None,
    devices: Sequence[tuple[str, str, str]] = (),
) -> dict[str, Any]:
    """The ContainerConfig the kubelet sends for ``name`` of the pod's spec (kubelet_pod.container_config),
    its log directory made first (kuberuntime_container.go:349-353)."""
    (pod.log_directory / name).mkdir(exist_ok=True)
    image = cri.image_status(pod.spec.container(name).image)
    return kp.container_config(pod.spec, name, pod.node, kp.Image(image.ref, image.uid, image.username),
                               restart_count, devices=devices, device_annotations=annotations)


def send_create(cri: CriClient, pod: PodHandle, name: str, config: Mapping[str, Any], restart_count: int) -> str:
    """CreateContainer with the pod's sandbox config; the new instance is the container's newest."""
    cid = cri.create_container_from(pod.sandbox_id, config, pod.sandbox_config)
    pod.instances.append((name, cid))
    pod.restart_counts[name] = restart_count
    pod.containers[name] = cid
    return cid


def _wait_exit_zero(cri: CriClient, container_id: str, timeout: float = 60.0) -> None:
    """Until an init container exited; the kubelet goes on only after an exit 0 (kubelet_sync)."""
    cri.wait_exited(container_id, node_env.scaled(timeout))
    code = cri.exit_code(container_id)
    if code:
        raise RuntimeError(f"init container {container_id[:12]} exited {code}: the kubelet would restart it")


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


def remove_pod(
    cri: CriClient,
    pod: PodHandle,
    stop_timeout_s: int | None = None,
    before: Callable[[ks.Call], None] | None = None,
) -> None:
    """Pod deletion in the kubelet's order (kubelet_sync.stop_calls): stop the running containers (apps,
    then sidecars), stop the sandbox, remove every container, remove the sandbox. ``stop_timeout_s``:
    StopContainer's timeout instead of the pod's grace period; ``before(call)`` runs before each call."""
    running = [n for n, cid in pod.containers.items() if cri.container_state(cid) in ("RUNNING", "UNKNOWN")]
    pending = list(pod.instances)
    for call in ks.stop_calls(pod.spec, running, [n for n, _ in pod.instances]):
        if before:
            before(call)
        if call.method == "StopContainer":
            cid = pod.containers[call.container]
            try:
                cri.stop_container(cid, stop_timeout_s if stop_timeout_s is not None else call.timeout)
            except grpc.RpcError:
                # it exited on its own meanwhile and its shim went away ("ttrpc: closed"): go by the status
                cri.wait_exited(cid, 5.0)
        elif call.method == "StopPodSandbox":
            cri.stop_pod_sandbox(pod.sandbox_id)
        elif call.method == "RemoveContainer":
            _, cid = pending.pop(0)
            if cri.container_state(cid) != "CREATED":  # a stop can return before containerd recorded the exit
                cri.wait_exited(cid, node_env.scaled(30.0))
            cri.remove_container(cid)
        else:
            cri.remove_pod_sandbox(pod.sandbox_id)
    pod.containers.clear()
    pod.instances.clear()
