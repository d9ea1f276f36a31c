"""components/nic-lookup on a real containerd (issue 35, item 7): the DaemonSet rendered with the component
runs both its containers through CRI as the kubelet would (their commands, mounts and securityContexts
from `kubectl kustomize`, mapped as test_image_e2e maps the plugin's; the runtime's default seccomp
profile), and a network namespace made on the host after they started is read from inside the plugin
container, which may not enter it itself, through the lookup container holding SYS_ADMIN alone.

Node state the test prepares as a real node has it: /var/run/netns a shared mount (`ip netns add` and
containerd's own netns code make it one on first use). One deviation from the kubelet, on containerd
1.7 only: the hostPath is passed resolved (/run/netns, /var/run being a link to /run). 1.7 checks that a
HostToContainer source sits on a shared or slave mount without resolving links (2.1 resolves them), so
it judges /var/run/netns by "/", which systemd makes shared on a real node but which is private here
(PID 1 is not systemd): with the path as written, 1.7's CreateContainer fails with 'path
"/var/run/netns" is mounted on "/" but it is not a shared or slave mount'. The kernel resolves the link
either way: the container's mount is the same."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("yaml", reason="PyYAML is needed to read the DaemonSet (pip install pyyaml==6.0.3)")

if TYPE_CHECKING:
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
from k8s_manifests import BASE, KUBE_DIR, configmap_settings, kustomization, pod_spec
from test_image_e2e import (
    IMAGE,
    exec_sync,
    host_path_map,
    image_tarball,  # noqa: F401  (fixture)
    parse_quantity,
    proc_status,
    security_context,
)

from nri_pinner.edge.nic_lookup.client import DEFAULT_SOCKET, SOCKET_ENV

COMPONENT = KUBE_DIR / "components" / "nic-lookup"
NETNS_DIR = Path("/var/run/netns")
CAP_SYS_ADMIN = 1 << 21
VENV_PYTHON = "/usr/lib/nri-pinner/venv/bin/python3"  # the package's, as the image's nri-pinner runs it
PROPAGATION = {"HostToContainer": "PROPAGATION_HOST_TO_CONTAINER", "Bidirectional": "PROPAGATION_BIDIRECTIONAL"}

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Run in the plugin container: its own setns (expected EPERM), then NetnsReader() as the plugin builds it.
PROBE = """
import ctypes, errno, json, os, sys
from nri_pinner.edge.nic_lookup.client import NetnsReader
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/proc/self/ns/net", os.O_RDONLY)
rc = libc.setns(fd, 0x40000000)
own = "entered" if rc == 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
reader = NetnsReader()
links = [link.to_json() for link in reader(sys.argv[1], "/sys", None)]
print(json.dumps({"own_setns": own, "socket": reader.socket_path, "visible_here": os.path.exists(sys.argv[1]),
                  "links": links}))
"""


def ip(*args: str) -> None:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    assert res.returncode == 0, f"ip {' '.join(args)}: {res.stderr}"


def is_mount_point(path: Path) -> bool:
    return any(line.split()[4] == str(path.resolve()) for line in Path("/proc/self/mountinfo").read_text().splitlines())


def share_netns_dir() -> None:
    """What `ip netns add` does on first use (iproute2 ip/ipnetns.c): /var/run/netns a shared mount."""
    NETNS_DIR.mkdir(parents=True, exist_ok=True)
    if not is_mount_point(NETNS_DIR):
        subprocess.run(["mount", "--bind", str(NETNS_DIR), str(NETNS_DIR)], check=True)
    subprocess.run(["mount", "--make-shared", str(NETNS_DIR)], check=True)


def resources_of(container: dict[str, Any]) -> km.ContainerResources:
    res = container.get("resources", {})
    req, lim = res.get("requests", {}), res.get("limits", {})
    return km.ContainerResources(parse_quantity(req.get("cpu", "0")), parse_quantity(lim.get("cpu", "0")),
                                 parse_quantity(req.get("memory", "0")), parse_quantity(lim.get("memory", "0")))


def start_pod(runtime: PrivateContainerd, rendered: Path, scratch: Path) -> dict[str, tuple[str, Path]]:
    """The rendered DaemonSet's pod: every container as the kubelet creates it; name → (id, host log)."""
    spec = pod_spec(rendered)
    pb = runtime.cri.pb
    containers: list[dict[str, Any]] = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    resources = [resources_of(c) for c in containers]
    qos = km.qos_class(resources)
    uid = str(uuid.uuid4())
    name = f"nri-pinner-{uid[:8]}"
    kpod = kp.Pod(name, "nri-pinner", uid,
                  tuple(kp.Container(c["name"], r) for c, r in zip(containers, resources, strict=True)))
    node = kubelet_node(runtime.pods_dir)
    parent = km.cgroup_parent(qos, uid)
    log_dir = scratch / "pod-logs"
    sandbox_config = runtime.cri.pod_sandbox_config(
        name=name, namespace="nri-pinner", uid=uid, cgroup_parent=parent, log_directory=log_dir,
        resources=km.pod_linux_resources(resources, node), labels=kp.pod_labels(kpod),
    )
    runtime.record_pod_cgroup(parent)
    sandbox_id = runtime.cri.run_pod_sandbox(sandbox_config)
    netns_host = NETNS_DIR.resolve() if runtime.runtime_key == "1.7" else NETNS_DIR  # see the docstring
    paths = host_path_map(runtime, scratch) | {str(NETNS_DIR): netns_host}
    ns = sandbox_config.linux.security_context.namespace_options
    started: dict[str, tuple[str, Path]] = {}
    for container, res in zip(containers, resources, strict=True):
        cri_mounts = []
        for m in container["volumeMounts"]:
            volume = volumes[m["name"]]
            if "hostPath" in volume:
                host = paths[volume["hostPath"]["path"]]
            elif "emptyDir" in volume:  # the kubelet's pods/<uid>/volumes/kubernetes.io~empty-dir/<name>
                host = scratch / "empty-dir" / m["name"]
            else:
                host = paths["configmap"]
            host.mkdir(parents=True, exist_ok=True)
            propagation = getattr(pb.MountPropagation, PROPAGATION.get(m.get("mountPropagation", ""),
                                                                         "PROPAGATION_PRIVATE"))
            cri_mounts.append(pb.Mount(container_path=m["mountPath"], host_path=str(host),
                                       readonly=bool(m.get("readOnly", False)), propagation=propagation))
        linux: Any = pb.LinuxContainerConfig(security_context=security_context(pb, ns, container["securityContext"]))
        linux.resources.CopyFrom(
            runtime.cri.message("LinuxContainerResources", km.container_linux_resources(res, qos, node)))
        (log_dir / container["name"]).mkdir(parents=True)
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=container["name"]),
            image=pb.ImageSpec(image=IMAGE),  # the rendered image is the overlay's; this test's is e2e.local
            command=list(container["command"]),
            envs=[pb.KeyValue(key=e["name"], value=e["value"]) for e in container.get("env", [])],
            mounts=cri_mounts,
            labels=kp.container_labels(kpod, container["name"]),
            log_path=f"{container['name']}/0.log",
            linux=linux,
        )
        req = pb.CreateContainerRequest(pod_sandbox_id=sandbox_id, config=config, sandbox_config=sandbox_config)
        cid = str(runtime.cri._call("CreateContainer", req).container_id)
        runtime.cri.start_container(cid)
        started[container["name"]] = (cid, log_dir / container["name"] / "0.log")
    return started


def log_of(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (containerd, ip netns, mount)")
def test_lookup_container_reads_a_new_pod_netns_for_the_capability_less_plugin_container(
    containerd: PrivateContainerd, image_tarball: Path, tmp_path: Path  # noqa: F811
) -> None:
    rendered = kustomization(tmp_path, "with-nic-lookup", [BASE], [COMPONENT])
    spec = pod_spec(rendered)
    names = [c["name"] for c in spec["containers"]]
    assert names == ["nri-pinner", "nic-lookup"], names
    lookup_spec = spec["containers"][1]
    socket_dir = next(m for m in lookup_spec["volumeMounts"] if m["name"] == "nic-lookup-socket")["mountPath"]
    assert lookup_spec["command"][-1] == DEFAULT_SOCKET and DEFAULT_SOCKET.startswith(socket_dir + "/")
    assert SOCKET_ENV not in {e["name"] for c in spec["containers"] for e in c.get("env", [])}  # the default

    containerd.import_image(image_tarball)
    share_netns_dir()
    since = containerd.log_offset()
    started = start_pod(containerd, rendered, tmp_path)
    (plugin_cid, plugin_log), (lookup_cid, lookup_log) = started["nri-pinner"], started["nic-lookup"]
    s = configmap_settings(rendered)
    try:
        containerd.wait_for_log(CONNECTED.pattern.replace("(?P<name>[^\"\\\\]+)", f"{s.nri.plugin_index}-"
                                                          f"{s.nri.plugin_name}"), since, timeout=60)
    except Exception:
        pytest.fail(f"the plugin container never connected over NRI; its log:\n{log_of(plugin_log)}")
    host_socket = tmp_path / "empty-dir" / "nic-lookup-socket" / Path(DEFAULT_SOCKET).name
    deadline = time.monotonic() + 30
    while not host_socket.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert host_socket.exists(), f"no lookup socket; nic-lookup's log:\n{log_of(lookup_log)}"

    lookup = proc_status(containerd.container_pid(lookup_cid))
    plugin = proc_status(containerd.container_pid(plugin_cid))
    assert int(lookup["CapEff"], 16) == CAP_SYS_ADMIN and int(lookup["CapPrm"], 16) == CAP_SYS_ADMIN, lookup
    assert int(lookup["CapBnd"], 16) == CAP_SYS_ADMIN and int(lookup["CapAmb"], 16) == 0, lookup
    assert int(plugin["CapEff"], 16) == 0 and int(plugin["CapBnd"], 16) == 0, plugin
    assert (lookup["Seccomp"], plugin["Seccomp"]) == ("2", "2") and lookup["NoNewPrivs"] == plugin["NoNewPrivs"] == "1"

    tag = uuid.uuid4().hex[:8]
    netns, host_end = f"nrip-e2e-{tag}", f"nrip{tag}a"
    try:  # made after both containers started: reaches the lookup container only through propagation
        ip("netns", "add", netns)
        ip("link", "add", host_end, "type", "veth", "peer", "name", f"nrip{tag}b")
        ip("link", "set", f"nrip{tag}b", "netns", netns)
        ip("-n", netns, "link", "set", f"nrip{tag}b", "name", "eth0")
        t0 = time.monotonic()
        code, out, err = exec_sync(containerd, plugin_cid, [VENV_PYTHON, "-c", PROBE, str(NETNS_DIR / netns)])
        seconds = time.monotonic() - t0
        assert code == 0, f"probe failed ({code}): {err}\nnic-lookup's log:\n{log_of(lookup_log)}"
        probe = json.loads(out)
    finally:
        subprocess.run(["ip", "link", "del", host_end], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
    assert probe["own_setns"] == "EPERM", probe  # the plugin container may not enter any namespace
    assert probe["socket"] == DEFAULT_SOCKET and probe["visible_here"] is False, probe
    links = {link["name"]: link for link in probe["links"]}
    assert set(links) == {"eth0"}, probe  # lo is no NIC: the lookup leaves it out
    assert links["eth0"]["kind"] == "veth" and links["eth0"]["numa"] is None, links
    for cid in (lookup_cid, plugin_cid):
        assert containerd.cri.container_state(cid) == "RUNNING", containerd.cri.container_status(cid)
    print(f"\npackaging: containerd {containerd.version}: nic-lookup CapEff {lookup['CapEff']} Seccomp "
          f"{lookup['Seccomp']}, plugin CapEff {plugin['CapEff']} Seccomp {plugin['Seccomp']}; plugin's own setns "
          f"{probe['own_setns']}; {netns} made after start read through the service in {seconds:.2f} s "
          f"(exec included): {sorted(links)}")
