"""The DaemonSet image runs as a container through CRI, with the DaemonSet's own mounts, env, command
and securityContext (rendered from packaging/kubernetes/base, not restated here, and turned into CRI
fields as the kubelet does), and pins a Guaranteed container started next to it: the proof that the
privileges the manifest grants (no capability at all) are enough. Host paths are remapped only where
the private containerd keeps its sockets (and the state/inspect dirs go to a tmp dir); the sandbox is
host-network because the harness has no CNI, so the probes' endpoints are reached on 127.0.0.1."""

from __future__ import annotations

import http.client
import importlib
import importlib.util
import json
import os
import posixpath
import re
import shutil
import subprocess
import tarfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

pytest.importorskip("yaml", reason="PyYAML is needed to read the DaemonSet (pip install pyyaml==6.0.3)")

if TYPE_CHECKING:  # mypy sees tests/ as a namespace package; pytest imports the harness as `e2e`
    from tests.e2e import kubelet_model as km
    from tests.e2e import kubelet_pod as kp
    from tests.e2e.harness import PrivateContainerd
    from tests.e2e.node_env import kubelet_node
    from tests.e2e.plugins import CONNECTED
else:
    from e2e import kubelet_model as km
    from e2e import kubelet_pod as kp
    from e2e.conftest import containerd, containerd_session  # noqa: F401  (fixtures)
    from e2e.harness import PrivateContainerd
    from e2e.node_env import kubelet_node
    from e2e.plugins import CONNECTED
from k8s_manifests import (
    configmap_config_text,
    configmap_settings,
    mounts,
    plugin_container,
    pod_spec,
)

from nri_pinner import __version__
from nri_pinner.engine.cpuset import CPUSet

REPO = Path(__file__).resolve().parents[2]
IMAGE = f"e2e.local/nri-pinner:{__version__}"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("nri_pinner.edge.app") is None,
        reason="nri_pinner.edge.app (the `nri-pinner run` daemon) is not written yet",
    ),
]


# What the kubelet puts in every non-privileged container's CRI config (pkg/securitycontext, procMount
# Default): these paths are masked or read-only inside the container.
KUBELET_MASKED_PATHS = ["/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
                        "/sys/devices/virtual/powercap"]
KUBELET_READONLY_PATHS = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]


def security_context(pb: Any, ns: Any, sc: dict[str, Any] | None = None) -> Any:
    """The manifest's securityContext (the plugin container's, or ``sc``) as kubelet sends it over CRI
    (kuberuntime security_context.go)."""
    sc = plugin_container()["securityContext"] if sc is None else sc
    privileged = bool(sc.get("privileged", False))
    caps = sc.get("capabilities", {})
    out = pb.LinuxContainerSecurityContext(
        namespace_options=ns, privileged=privileged,
        capabilities=pb.Capability(add_capabilities=caps.get("add", []), drop_capabilities=caps.get("drop", [])),
        readonly_rootfs=bool(sc.get("readOnlyRootFilesystem", False)),
        no_new_privs=not sc.get("allowPrivilegeEscalation", True),
    )
    if "runAsUser" in sc:
        out.run_as_user.value = int(sc["runAsUser"])
    if sc.get("seccompProfile", {}).get("type") == "RuntimeDefault":
        out.seccomp.profile_type = pb.SecurityProfile.ProfileType.RuntimeDefault
    if not privileged:
        out.masked_paths.extend(KUBELET_MASKED_PATHS)
        out.readonly_paths.extend(KUBELET_READONLY_PATHS)
    return out


def http_get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        reply = conn.getresponse()
        return reply.status, reply.read().decode()
    finally:
        conn.close()


def wait_ready(port: int, timeout: float = 30.0) -> tuple[int, str]:
    deadline = time.monotonic() + timeout
    last: tuple[int, str] = (0, "no answer")
    while time.monotonic() < deadline:
        try:
            last = http_get(port, "/readyz")
        except OSError as exc:
            last = (0, str(exc))
        if last[0] == 200:
            break
        time.sleep(0.2)
    return last


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


Layers = tuple[dict[str, tarfile.TarInfo], dict[str, bytes]]


def layer_contents(image: Path, read: frozenset[str] = frozenset()) -> Layers:
    """Every path in the OCI archive's layers, and the bytes of the files named in ``read``."""
    members: dict[str, tarfile.TarInfo] = {}
    data: dict[str, bytes] = {}
    with tarfile.open(image) as outer:
        for member in outer.getmembers():
            if not member.isfile() or not member.name.startswith("blobs/") or member.size < 1 << 20:
                continue
            blob = outer.extractfile(member)
            assert blob is not None
            try:
                with tarfile.open(fileobj=blob, mode="r|*") as layer:
                    for m in layer:
                        name = m.name.removeprefix("./").rstrip("/")
                        members[name] = m
                        if name in read and m.isfile():
                            content = layer.extractfile(m)
                            assert content is not None
                            data[name] = content.read()
            except tarfile.ReadError:
                continue
    return members, data


def layer_names(image: Path) -> set[str]:
    return set(layer_contents(image)[0])


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
        "/run/systemd": scratch / "systemd",  # PID 1 here is not systemd: an empty directory, no bus
        "/sys": Path("/sys"),
        "/sys/fs/cgroup": Path("/sys/fs/cgroup"),
        "configmap": config_dir,
    }


def start_daemonset_pod(runtime: PrivateContainerd, scratch: Path) -> tuple[str, Path]:
    container = plugin_container()
    pb = runtime.cri.pb
    privileged = bool(container["securityContext"].get("privileged", False))
    assert not pod_spec().get("hostNetwork", False)  # the harness's sandbox is host-network anyway (no CNI)
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
    spec = kp.Pod(name, "nri-pinner", uid, (kp.Container(container["name"], resources),))
    node = kubelet_node(runtime.pods_dir)
    parent = km.cgroup_parent(qos, uid)
    log_dir = scratch / "pod-logs"
    (log_dir / container["name"]).mkdir(parents=True)
    sandbox_config = runtime.cri.pod_sandbox_config(
        name=name,
        namespace="nri-pinner",
        uid=uid,
        cgroup_parent=parent,
        log_directory=log_dir,
        resources=km.pod_linux_resources([resources], node),
        labels=kp.pod_labels(spec),
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
    linux: Any = pb.LinuxContainerConfig(security_context=security_context(pb, ns))
    linux.resources.CopyFrom(
        runtime.cri.message("LinuxContainerResources", km.container_linux_resources(resources, qos, node))
    )
    config = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=container["name"]),
        image=pb.ImageSpec(image=IMAGE),
        command=list(container["command"]),
        envs=[pb.KeyValue(key=e["name"], value=e["value"]) for e in container.get("env", [])],
        mounts=cri_mounts,
        labels=kp.container_labels(spec, container["name"]),
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

    plugin_pid = containerd.container_pid(plugin_cid)
    status = proc_status(plugin_pid)
    # No capability at all, no way to gain one, and seccomp filtering (the manifest's securityContext).
    assert {status[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {"0000000000000000"}, status
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"

    port = configmap_settings().metrics.port
    assert wait_ready(port) == (200, "ready: registered and synchronized\n")
    assert http_get(port, "/healthz") == (200, "ok\n")
    assert http_get(port, "/")[0] == 404
    code, text = http_get(port, "/metrics")
    assert code == 200 and "nri_pinner_connected 1.0" in text and "process_resident_memory_bytes" in text

    pod = containerd.run_pod("guaranteed", 1000, 1000)
    (cid,) = pod.container_ids
    allowed = CPUSet.parse(containerd.cpus_allowed_list(cid))
    assert len(allowed) == 1, f"Guaranteed 1-CPU container not pinned: Cpus_allowed_list {allowed}"
    assert CPUSet.parse(containerd.cgroup_cpuset(cid)) == allowed
    # The plugin's container may write a container's cpuset through its /sys/fs/cgroup mount (the
    # direct cgroup write path): same process credentials as the plugin, same mounts.
    cpuset_file = containerd._cpuset_file(cid)
    write = ("import sys; f = open(sys.argv[1], 'w'); f.write(sys.argv[2]); f.close(); "
             "print(open(sys.argv[1]).read().strip())")
    res = exec_sync(containerd, plugin_cid, ["python3", "-c", write, str(cpuset_file), str(allowed)])
    assert res == (0, f"{allowed}\n", ""), res
    state, _ = containerd.cri.container_status(plugin_cid)
    assert state == "RUNNING"
    containerd.remove_pod(pod)


def exec_sync(runtime: PrivateContainerd, cid: str, cmd: list[str]) -> tuple[int, str, str]:
    pb = runtime.cri.pb
    grpc_stubs: Any = importlib.import_module("e2e.gen.api_pb2_grpc")
    with grpc.insecure_channel(f"unix://{runtime.paths.grpc_socket}") as channel:
        stub: Any = grpc_stubs.RuntimeServiceStub(channel)
        reply = stub.ExecSync(pb.ExecSyncRequest(container_id=cid, cmd=cmd, timeout=20), timeout=30)
    return int(reply.exit_code), reply.stdout.decode(), reply.stderr.decode()


def test_image_carries_no_wheels(image_tarball: Path) -> None:
    names = layer_names(image_tarball)
    assert any(n.startswith("usr/lib/nri-pinner/venv/") for n in names), "no venv in the image?"
    assert not [n for n in names if n.endswith(".whl")], "wheels left in the image"
    print(f"image {image_tarball.name}: {image_tarball.stat().st_size / 1e6:.1f} MB")


def test_image_keeps_every_packages_copyright(image_tarball: Path) -> None:
    """Trimming docs from the image must keep each installed package's /usr/share/doc/PKG/copyright
    (its license terms), nri-pinner's own included; a doc directory may be a link to another package's."""
    members, data = layer_contents(image_tarball, frozenset({"var/lib/dpkg/status"}))
    installed = [block.split("\n", 1)[0].removeprefix("Package: ")
                 for block in data["var/lib/dpkg/status"].decode().split("\n\n")
                 if block.startswith("Package: ") and "\nStatus: install ok installed" in block]
    assert "nri-pinner" in installed and "python3" in installed
    missing = []
    for package in installed:
        doc = f"usr/share/doc/{package}"
        link = members.get(doc)
        if link is not None and link.issym():
            doc = posixpath.normpath(posixpath.join(posixpath.dirname(doc), link.linkname)).lstrip("/")
        if f"{doc}/copyright" not in members:
            missing.append(package)
    assert missing == [], f"{len(missing)} of {len(installed)} packages without their copyright file: {missing}"


def test_readme_names_the_image_recipe_this_test_builds() -> None:
    """One recipe (the one built here); packaging/image/Containerfile copied a .deb name the build never
    made and was never built by any test, so it went."""
    readme = (REPO / "docs" / "install.md").read_text()  # the README's install page
    section = readme.split("## Install", 1)[1].split("\n### Privileges", 1)[0]
    assert set(re.findall(r"packaging/image/[\w.-]+", section)) == {"packaging/image/build-image.sh"}
    assert sorted(p.name for p in (REPO / "packaging" / "image").iterdir()) == ["base-root.sh", "build-image.sh"]
    assert "skopeo copy oci-archive:dist/nri-pinner-image_<version>.tar docker://" in " ".join(section.split())


@pytest.mark.skipif(os.geteuid() != 0, reason="installs skopeo on first use (root)")
def test_skopeo_reads_the_image_archive_as_the_readme_pushes_it(image_tarball: Path) -> None:
    if not shutil.which("skopeo"):  # a fresh CI machine: ~5 s
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "skopeo"]
        if subprocess.run(install, capture_output=True, check=False).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, check=True)
            subprocess.run(install, capture_output=True, check=True)
    assert image_tarball.name == f"nri-pinner-image_{__version__}.tar"  # the README's name
    res = subprocess.run(["skopeo", "inspect", "--config", f"oci-archive:{image_tarball}"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    config = json.loads(res.stdout)
    assert config["config"]["Cmd"] == plugin_container()["command"]
    assert config["architecture"] == "amd64" and config["os"] == "linux"
