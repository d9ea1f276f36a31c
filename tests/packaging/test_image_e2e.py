"""The DaemonSet image runs as a container through CRI, with the DaemonSet's own mounts, env, command
and privileges (read from packaging/kubernetes, not restated here), and pins a Guaranteed container
started next to it. Host paths are remapped only where the private containerd keeps its sockets
(and the state/inspect dirs go to a tmp dir); the sandbox is host-network because the harness has no
CNI (the DaemonSet needs no network: it talks over unix sockets only)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

pytest.importorskip("yaml", reason="PyYAML is needed to read the DaemonSet (pip install pyyaml==6.0.3)")

if TYPE_CHECKING:  # mypy sees tests/ as a namespace package; pytest imports the harness as `e2e`
    from tests.e2e import kubelet_model as km
    from tests.e2e.harness import PrivateContainerd
    from tests.e2e.plugins import CONNECTED
    from tests.e2e.procfs import memory_capacity_bytes
else:
    from e2e import kubelet_model as km
    from e2e.conftest import containerd, containerd_session  # noqa: F401  (fixtures)
    from e2e.harness import PrivateContainerd
    from e2e.plugins import CONNECTED
    from e2e.procfs import memory_capacity_bytes
from k8s_manifests import (
    configmap_config_text,
    configmap_settings,
    mounts,
    plugin_container,
)

from nri_pinner import __version__
from nri_pinner.engine.cpuset import CPUSet

REPO = Path(__file__).resolve().parents[2]
IMAGE = f"e2e.local/nri-pinner:{__version__}"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("nri_pinner.service.app") is None,
        reason="nri_pinner.service.app (the `nri-pinner run` daemon) is not written yet",
    ),
]


def parse_quantity(text: str) -> int:
    """Kubernetes quantities used in the manifest: "50m" CPU → 50 milli; "64Mi" → bytes; "1" → 1000m."""
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    if text.endswith("m"):
        return int(text[:-1])
    return int(text) * 1000


@pytest.fixture(scope="module")
def image_tarball() -> Path:
    res = subprocess.run(
        [str(REPO / "packaging" / "image" / "build-image.sh")], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr[-4000:]
    return Path(res.stdout.strip().splitlines()[-1])


def host_path_map(runtime: PrivateContainerd, scratch: Path) -> dict[str, Path]:
    """Where each hostPath of the DaemonSet lives for this private containerd."""
    s = configmap_settings()
    run_dir = runtime.paths.grpc_socket.parent
    # The config names the sockets nri.sock and containerd.sock; the harness uses the same names.
    assert runtime.paths.nri_socket == run_dir / Path(s.nri.socket).name
    assert runtime.paths.grpc_socket == run_dir / Path(s.reconcile.cri_socket).name
    config_dir = scratch / "config"
    config_dir.mkdir()
    (config_dir / "config.toml").write_text(configmap_config_text())
    return {
        "/var/run/nri": run_dir,
        "/run/containerd": run_dir,
        "/var/lib/nri-pinner": scratch / "state",
        "/run/nri-pinner": scratch / "inspect",
        "/sys": Path("/sys"),
        "/sys/fs/cgroup": Path("/sys/fs/cgroup"),
        "configmap": config_dir,
    }


def start_daemonset_pod(runtime: PrivateContainerd, scratch: Path) -> tuple[str, Path]:
    container = plugin_container()
    pb = runtime.cri.pb
    privileged = bool(container["securityContext"]["privileged"])
    res = container["resources"]
    resources = km.ContainerResources(
        parse_quantity(res["requests"]["cpu"]),
        parse_quantity(res.get("limits", {}).get("cpu", "0")),
        parse_quantity(res["requests"]["memory"]),
        parse_quantity(res["limits"]["memory"]),
    )
    qos = km.qos_class([resources])
    uid = str(uuid.uuid4())
    name = f"nri-pinner-{uid[:8]}"
    parent = km.cgroup_parent(qos, uid)
    log_dir = scratch / "pod-logs"
    (log_dir / container["name"]).mkdir(parents=True)
    sandbox_config = runtime.cri.pod_sandbox_config(
        name=name,
        namespace="nri-pinner",
        uid=uid,
        cgroup_parent=parent,
        log_directory=log_dir,
        resources=km.pod_linux_resources([resources]),
        labels=km.pod_labels(name, "nri-pinner", uid),
        privileged=privileged,
    )
    runtime.record_pod_cgroup(parent)
    sandbox_id = runtime.cri.run_pod_sandbox(sandbox_config)

    paths = host_path_map(runtime, scratch)
    cri_mounts = []
    for m in mounts():
        host = paths[m.host_path] if m.host_path is not None else paths["configmap"]
        host.mkdir(parents=True, exist_ok=True)
        cri_mounts.append(pb.Mount(container_path=m.container_path, host_path=str(host), readonly=m.read_only))
    ns = sandbox_config.linux.security_context.namespace_options
    linux: Any = pb.LinuxContainerConfig(
        security_context=pb.LinuxContainerSecurityContext(namespace_options=ns, privileged=privileged)
    )
    linux.resources.CopyFrom(
        pb.LinuxContainerResources(**km.container_linux_resources(resources, qos, memory_capacity_bytes()))
    )
    config = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=container["name"]),
        image=pb.ImageSpec(image=IMAGE),
        command=list(container["command"]),
        envs=[pb.KeyValue(key=e["name"], value=e["value"]) for e in container.get("env", [])],
        mounts=cri_mounts,
        labels=km.container_labels(name, "nri-pinner", uid, container["name"]),
        log_path=f"{container['name']}/0.log",
        linux=linux,
    )
    grpc_stubs: Any = importlib.import_module("e2e.gen.api_pb2_grpc")  # generated by the CriClient above
    with grpc.insecure_channel(f"unix://{runtime.paths.grpc_socket}") as channel:
        stub: Any = grpc_stubs.RuntimeServiceStub(channel)
        req = pb.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config)
        cid = str(stub.CreateContainer(req, timeout=60).container_id)
    runtime.cri.start_container(cid)
    return cid, log_dir / container["name"] / "0.log"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (containerd, chroot)")
def test_image_runs_with_daemonset_mounts_and_pins_a_guaranteed_container(
    containerd: PrivateContainerd, image_tarball: Path, tmp_path: Path
) -> None:
    containerd.import_image(image_tarball)
    since = containerd.log_offset()
    plugin_cid, plugin_log = start_daemonset_pod(containerd, tmp_path)
    s = configmap_settings()
    registered = f"{s.nri.plugin_index}-{s.nri.plugin_name}"
    try:
        containerd.wait_for_log(CONNECTED.pattern.replace("(?P<name>[^\"\\\\]+)", registered), since, timeout=60)
    except Exception:
        log = plugin_log.read_text(errors="replace") if plugin_log.exists() else "(no log)"
        pytest.fail(f"the DaemonSet container never connected over NRI; its log:\n{log[-4000:]}")

    pod = containerd.run_pod("guaranteed", 1000, 1000)
    (cid,) = pod.container_ids
    allowed = CPUSet.parse(containerd.cpus_allowed_list(cid))
    assert len(allowed) == 1, f"Guaranteed 1-CPU container not pinned: Cpus_allowed_list {allowed}"
    assert CPUSet.parse(containerd.cgroup_cpuset(cid)) == allowed
    state, _ = containerd.cri.container_status(plugin_cid)
    assert state == "RUNNING"
    containerd.remove_pod(pod)
