"""A small CRI (runtime.v1) client that sends what the kubelet sends, over a private containerd's socket.

Messages come from stubs generated at run time (``cri_stubs.ensure_cri_stubs``); they are imported
dynamically and typed ``Any`` because generated protobuf code is outside the typed surface. The public
methods take and return plain Python values.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
from google.protobuf import json_format

from .cri_stubs import ensure_cri_stubs

# NamespaceMode in api.proto
NS_POD, NS_CONTAINER, NS_NODE = 0, 1, 2
# ContainerState in api.proto
CONTAINER_STATES = {0: "CREATED", 1: "RUNNING", 2: "EXITED", 3: "UNKNOWN"}
DEFAULT_CALL_TIMEOUT = 60.0  # seconds: a hung runtime becomes an error, not a stuck test run
# The kubelet's CRI client limit (k8s.io/cri-client maxMsgSize, 16 MiB); gRPC's default 4 MiB receive
# limit fails ListPodSandbox on a node whose pods carry a few MiB of annotations.
MAX_MESSAGE_BYTES = 16 << 20


def _load_stubs() -> tuple[ModuleType, ModuleType]:
    ensure_cri_stubs()
    pkg = __package__ or "tests.e2e"
    return importlib.import_module(f"{pkg}.gen.api_pb2"), importlib.import_module(f"{pkg}.gen.api_pb2_grpc")


@dataclass(frozen=True)
class RuntimeVersion:
    runtime_name: str
    runtime_version: str
    runtime_api_version: str


@dataclass(frozen=True)
class ContainerSummary:
    id: str
    pod_sandbox_id: str
    name: str
    state: str
    labels: dict[str, str]
    annotations: dict[str, str]


@dataclass(frozen=True)
class ImageInfo:
    ref: str  # ImageStatus image.id
    uid: int | None  # None when the image names its user
    username: str


@dataclass(frozen=True)
class SandboxSummary:
    id: str
    name: str
    namespace: str
    uid: str
    ready: bool


class CriClient:
    """Blocking CRI RuntimeService client for ``unix://<socket>``."""

    def __init__(self, socket: Path, timeout: float = DEFAULT_CALL_TIMEOUT) -> None:
        self.pb, grpc_mod = _load_stubs()
        self.timeout = timeout
        self._channel = grpc.insecure_channel(
            f"unix://{socket}",
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        self._rt: Any = grpc_mod.RuntimeServiceStub(self._channel)
        self._img: Any = grpc_mod.ImageServiceStub(self._channel)
        self._images: dict[str, ImageInfo] = {}

    def close(self) -> None:
        self._channel.close()

    def _call(self, method: str, request: Any) -> Any:
        return getattr(self._rt, method)(request, timeout=self.timeout)

    def version(self) -> RuntimeVersion:
        r = self._call("Version", self.pb.VersionRequest(version="v1"))
        return RuntimeVersion(r.runtime_name, r.runtime_version, r.runtime_api_version)

    def image_status(self, image: str) -> ImageInfo:
        """ImageStatus as the kubelet reads it for a container's image ref and user (cached: the
        answer does not change while the image stays)."""
        if image not in self._images:
            req = self.pb.ImageStatusRequest(image=self.pb.ImageSpec(image=image))
            img = self._img.ImageStatus(req, timeout=self.timeout).image
            if not img.id:
                raise LookupError(f"image {image} is not in the runtime")
            uid = img.uid.value if img.HasField("uid") else (None if img.username else 0)
            self._images[image] = ImageInfo(img.id, uid, img.username)
        return self._images[image]

    # --- requests -----------------------------------------------------------------------------------
    def message(self, type_name: str, fields: Mapping[str, Any]) -> Any:
        """A CRI message from a dict with the proto field names (kubelet_pod.py builds them)."""
        return json_format.ParseDict(dict(fields), getattr(self.pb, type_name)())

    def create_container_from(self, sandbox_id: str, config: Mapping[str, Any], sandbox_config: Any) -> str:
        req = self.pb.CreateContainerRequest(
            pod_sandbox_id=sandbox_id, config=self.message("ContainerConfig", config), sandbox_config=sandbox_config
        )
        return str(self._call("CreateContainer", req).container_id)

    def pod_sandbox_config(
        self,
        *,
        name: str,
        namespace: str,
        uid: str,
        cgroup_parent: str,
        log_directory: Path,
        resources: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        privileged: bool = False,
    ) -> Any:
        """A host-network PodSandboxConfig. ``hostname`` stays empty, as the kubelet leaves it for
        hostNetwork pods: containerd drops the UTS namespace and runc refuses a hostname without one."""
        pb = self.pb
        ns = pb.NamespaceOption(network=NS_NODE, pid=NS_CONTAINER, ipc=NS_POD)
        linux = pb.LinuxPodSandboxConfig(
            cgroup_parent=cgroup_parent,
            security_context=pb.LinuxSandboxSecurityContext(namespace_options=ns, privileged=privileged),
        )
        if resources is not None:
            linux.resources.CopyFrom(self.message("LinuxContainerResources", resources))
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace=namespace, attempt=0),
            hostname="",
            log_directory=str(log_directory),
            labels=dict(labels or {}),
            annotations=dict(annotations or {}),
            linux=linux,
        )

    def run_pod_sandbox(self, config: Any, runtime_handler: str = "") -> str:
        req = self.pb.RunPodSandboxRequest(config=config, runtime_handler=runtime_handler)
        return str(self._call("RunPodSandbox", req).pod_sandbox_id)

    def create_container(
        self,
        sandbox_id: str,
        sandbox_config: Any,
        *,
        name: str,
        image: str,
        command: Sequence[str],
        args: Sequence[str] = (),
        resources: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        log_path: str = "",
        envs: Mapping[str, str] | None = None,
        privileged: bool = False,
        attempt: int = 0,
        devices: Sequence[tuple[str, str, str]] = (),  # (container path, host path, permissions "rwm")
    ) -> str:
        pb = self.pb
        ns = sandbox_config.linux.security_context.namespace_options
        linux = pb.LinuxContainerConfig(
            security_context=pb.LinuxContainerSecurityContext(namespace_options=ns, privileged=privileged)
        )
        if resources is not None:
            linux.resources.CopyFrom(self.message("LinuxContainerResources", resources))
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=attempt),
            image=pb.ImageSpec(image=image),
            command=list(command),
            args=list(args),
            envs=[pb.KeyValue(key=k, value=v) for k, v in (envs or {}).items()],
            labels=dict(labels or {}),
            annotations=dict(annotations or {}),
            log_path=log_path,
            linux=linux,
            devices=[pb.Device(container_path=c, host_path=h, permissions=p) for c, h, p in devices],
        )
        req = pb.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config)
        return str(self._call("CreateContainer", req).container_id)

    def start_container(self, container_id: str) -> None:
        self._call("StartContainer", self.pb.StartContainerRequest(container_id=container_id))

    def update_container_resources(self, container_id: str, **fields: Any) -> None:
        """E.g. ``update_container_resources(cid, cpuset_cpus="1")`` (the static CPU manager's cpuset-only
        update) or a resize as kubelet_pod.resize_resources builds it (its dict passed as keywords)."""
        req = self.pb.UpdateContainerResourcesRequest(
            container_id=container_id, linux=self.message("LinuxContainerResources", fields)
        )
        self._call("UpdateContainerResources", req)

    def stop_container(self, container_id: str, timeout_s: int = 10) -> None:
        self._call("StopContainer", self.pb.StopContainerRequest(container_id=container_id, timeout=timeout_s))

    def remove_container(self, container_id: str) -> None:
        self._call("RemoveContainer", self.pb.RemoveContainerRequest(container_id=container_id))

    def wait_exited(self, container_id: str, timeout: float = 30.0) -> None:
        """Until ContainerStatus says EXITED (or the container is gone). StopContainer can return, or a
        process exit on its own can be seen, before containerd's exit handling has recorded it; a
        RemoveContainer then fails with "container is still running, to stop first"."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                resp = self._call("ContainerStatus", self.pb.ContainerStatusRequest(container_id=container_id))
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.NOT_FOUND:
                    return
                raise
            state = CONTAINER_STATES.get(resp.status.state, str(resp.status.state))
            if state == "EXITED":
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"container {container_id[:12]} still {state} {timeout}s after StopContainer")
            time.sleep(0.02)

    def stop_and_remove(self, container_id: str, timeout_s: int = 10) -> None:
        """The kubelet's order: StopContainer, then RemoveContainer only once the status says EXITED."""
        state = self.container_state(container_id)
        if state in ("RUNNING", "UNKNOWN"):
            try:
                self.stop_container(container_id, timeout_s)
            except grpc.RpcError:
                # it exited on its own meanwhile and its shim went away ("ttrpc: closed"): like the
                # kubelet's next sync, go by the status; a container still running re-raises
                self.wait_exited(container_id, 5.0)
        if state != "CREATED":
            self.wait_exited(container_id, timeout_s + 20.0)
        self.remove_container(container_id)

    def exit_code(self, container_id: str) -> int:
        resp = self._call("ContainerStatus", self.pb.ContainerStatusRequest(container_id=container_id))
        return int(resp.status.exit_code)

    def container_state(self, container_id: str) -> str:
        resp = self._call("ContainerStatus", self.pb.ContainerStatusRequest(container_id=container_id))
        return CONTAINER_STATES.get(resp.status.state, str(resp.status.state))

    def stop_pod_sandbox(self, sandbox_id: str) -> None:
        self._call("StopPodSandbox", self.pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id))

    def remove_pod_sandbox(self, sandbox_id: str) -> None:
        self._call("RemovePodSandbox", self.pb.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id))

    def list_containers(self, pod_sandbox_id: str = "") -> list[ContainerSummary]:
        flt = self.pb.ContainerFilter(pod_sandbox_id=pod_sandbox_id)
        resp = self._call("ListContainers", self.pb.ListContainersRequest(filter=flt))
        return [
            ContainerSummary(
                c.id,
                c.pod_sandbox_id,
                c.metadata.name,
                CONTAINER_STATES.get(c.state, str(c.state)),
                dict(c.labels),
                dict(c.annotations),
            )
            for c in resp.containers
        ]

    def list_pod_sandboxes(self) -> list[SandboxSummary]:
        resp = self._call("ListPodSandbox", self.pb.ListPodSandboxRequest())
        return [
            SandboxSummary(s.id, s.metadata.name, s.metadata.namespace, s.metadata.uid, s.state == 0)
            for s in resp.items
        ]

    def container_status(self, container_id: str) -> tuple[str, dict[str, Any]]:
        """(state, verbose info): the info JSON holds ``pid`` and ``runtimeSpec`` (with linux.cgroupsPath)."""
        resp = self._call("ContainerStatus", self.pb.ContainerStatusRequest(container_id=container_id, verbose=True))
        info: dict[str, Any] = json.loads(resp.info["info"]) if "info" in resp.info else {}
        return CONTAINER_STATES.get(resp.status.state, str(resp.status.state)), info

    def remove_everything(self) -> None:
        """Stop and remove every container and sandbox (a private instance holds only this run's pods)."""
        for c in self.list_containers():
            self.stop_and_remove(c.id, timeout_s=2)
        for s in self.list_pod_sandboxes():
            self.stop_pod_sandbox(s.id)
            self.remove_pod_sandbox(s.id)
