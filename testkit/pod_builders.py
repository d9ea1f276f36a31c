"""NRI pods and containers shaped as the kubelet + containerd put them into NRI, for the core tests
(tests/core/core_harness.py) and the service tests (tests/service/svc_harness.py).

The pod's cgroup parent per QoS class (cgroupfs `/kubepods[/burstable|/besteffort]/pod<uid>`; with
qos="plain" a pod of a plain containerd client, outside kubepods: not a kubelet pod), cpu shares from
the request (kubelet MilliCPUToShares), quota/period from the limit, `linux.cgroups_path` below the
parent. Nothing marks an init container (the kubelet writes no container type); `container(...,
init=True)` adds nri-pinner's documented plain-containerd override instead (PLAIN_CONTAINERD_TYPE, README).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import Topology
from nri_pinner.nri.gen import api_pb2 as api

PERIOD = 100_000
# NOT a kubelet field: the container annotation a plain containerd client sets to mark an init container
# (README "How Kubernetes intent is read"; nri_pinner/core/intent.py CONTAINER_TYPE_OVERRIDE)
PLAIN_CONTAINERD_TYPE = "io.kubernetes.container.type"


def pod(name: str, qos: str = "guaranteed", *, uid: str | None = None, namespace: str = "default",
        annotations: Mapping[str, str] | None = None) -> api.PodSandbox:
    """A kubelet pod (cgroup parent under kubepods), or with qos="plain" a pod of a plain containerd
    client (no kubepods parent: not a kubelet pod)."""
    uid = uid or f"uid-{name}"
    parent = {"guaranteed": f"/kubepods/pod{uid}", "burstable": f"/kubepods/burstable/pod{uid}",
              "besteffort": f"/kubepods/besteffort/pod{uid}", "plain": f"/plain/{name}"}[qos]
    p = api.PodSandbox(id=f"sb-{name}", name=name, uid=uid, namespace=namespace, annotations=annotations or {})
    p.linux.cgroup_parent = parent
    return p


def container(sandbox: api.PodSandbox, name: str, request_milli: int = 0, limit_milli: int = 0, *,
              init: bool = False, cid: str | None = None, cpus: str = "", mems: str = "",
              state: int = api.CONTAINER_RUNNING) -> api.Container:
    """A container as containerd reports it; ``cpus``/``mems`` are its record's cpuset (Synchronize).
    ``init``: marked with the plain-containerd override (the kubelet itself marks none)."""
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


def kubelet_container(sandbox: api.PodSandbox, name: str, request: int = 0, limit: int = 0, *,
                      cid: str | None = None, cpus: str = "", mems: str = "",
                      state: int = api.CONTAINER_RUNNING) -> api.Container:
    """As the kubelet sends it: its labels, no container-type annotation (v1.32
    pkg/kubelet/kuberuntime/labels.go writes none)."""
    c = container(sandbox, name, request, limit, cid=cid, cpus=cpus, mems=mems, state=state)
    c.labels.update({"io.kubernetes.pod.namespace": sandbox.namespace, "io.kubernetes.pod.name": sandbox.name,
                     "io.kubernetes.pod.uid": sandbox.uid, "io.kubernetes.container.name": name})
    return c


def exited(c: api.Container, code: int = 0) -> api.Container:
    """A copy of ``c`` as a StopContainer carries it: stopped, with its exit status."""
    out = api.Container()
    out.CopyFrom(c)
    out.state = api.CONTAINER_STOPPED
    out.exit_code = code
    return out


def create_request(sandbox: api.PodSandbox, c: api.Container) -> api.CreateContainerRequest:
    return api.CreateContainerRequest(pod=sandbox, container=c)


def resize_request(c: api.Container, sandbox: api.PodSandbox, milli: int,
                   limit: int | None = None) -> api.UpdateContainerRequest:
    """The kubelet's UpdateContainerResources as containerd relays it: shares and quota set, its
    stored spec keeping the create's cpuset."""
    req = api.UpdateContainerRequest(pod=sandbox, container=c)
    cpu = req.linux_resources.cpu
    cpu.shares.value = max(2, milli * 1024 // 1000)  # kubelet MilliCPUToShares
    limit = milli if limit is None else limit
    if limit:
        cpu.quota.value, cpu.period.value = limit * PERIOD // 1000, PERIOD
    cpu.cpus = c.linux.resources.cpu.cpus
    return req


def mems_for(topology: Topology, cpus: CPUSet) -> str:
    """The NUMA nodes holding ``cpus``, as cpuset.mems text (computed from sysfs, not from the engine)."""
    return ",".join(str(n) for n in topology.numa_nodes if topology.numa_cpus[n] & cpus)



# -- from the kubelet's CRI requests (tests/e2e/kubelet_pod.py) to NRI, as containerd converts them --------
# containerd v1.7.24 (NRI v0.6.1) and v2.1.9 (NRI v0.8.0) fill the same fields the same way; line numbers
# are "1.7.24 / 2.1.9". Fields nri-pinner does not read (namespaces, the sandbox's own OCI resources,
# containerd's io.kubernetes.cri.* annotations, labels) are left out.

def _cri_resources(msg: api.LinuxResources, res: Mapping[str, Any]) -> None:
    """FromCRILinuxResources (NRI v0.6.1 pkg/api/resources.go:71-96; containerd 2.1.9
    internal/cri/nri/nri_api_linux.go:880-911 fromCRILinuxResources): shares, quota, period and the
    memory limit are always set, a zero too."""
    msg.cpu.shares.value = int(res.get("cpu_shares", 0))
    msg.cpu.quota.value = int(res.get("cpu_quota", 0))
    msg.cpu.period.value = int(res.get("cpu_period", 0))
    msg.memory.limit.value = int(res.get("memory_limit_in_bytes", 0))


def nri_pod_from_cri(config: Mapping[str, Any], sandbox_id: str) -> api.PodSandbox:
    """The NRI PodSandbox of a RunPodSandbox's PodSandboxConfig (CRI field names): pkg/nri/sandbox_linux.go
    :25-37 podSandboxToNRI (both releases) over criPodSandbox (pkg/cri/nri/nri_api_linux.go in 1.7.24,
    internal/cri/nri/nri_api_linux.go in 2.1.9): the config's annotations (:539 / :559),
    linux.pod_overhead and linux.pod_resources from the config's linux.overhead and linux.resources
    (:604-615 / :624-635), linux.cgroup_parent (:624 / :644)."""
    meta, linux = config["metadata"], config.get("linux", {})
    p = api.PodSandbox(id=sandbox_id, name=meta["name"], uid=meta["uid"], namespace=meta["namespace"],
                       annotations=dict(config.get("annotations", {})), labels=dict(config.get("labels", {})))
    p.linux.cgroup_parent = linux.get("cgroup_parent", "")
    if "overhead" in linux:
        _cri_resources(p.linux.pod_overhead, linux["overhead"])
    if "resources" in linux:
        _cri_resources(p.linux.pod_resources, linux["resources"])
    return api.PodSandbox.FromString(p.SerializeToString())


def nri_container_from_cri(config: Mapping[str, Any], sandbox: api.PodSandbox, cid: str) -> api.Container:
    """The NRI Container of a CreateContainer's ContainerConfig: criContainer.GetLinuxResources (:822 /
    :850) = FromOCILinuxResources of the OCI spec, whose CPU and memory WithResources wrote from the
    CRI resources only where non-zero (pkg/cri/opts/spec_linux_opts.go:285-330 /
    internal/cri/opts/spec_linux_opts.go:359-406: period :385, quota :388, shares :391, memory limit :400)."""
    res = config.get("linux", {}).get("resources", {})
    c = api.Container(id=cid, pod_sandbox_id=sandbox.id, name=config["metadata"]["name"],
                      labels=dict(config.get("labels", {})), annotations=dict(config.get("annotations", {})))
    cpu = c.linux.resources.cpu
    for field_name, key in (("period", "cpu_period"), ("quota", "cpu_quota"), ("shares", "cpu_shares")):
        if res.get(key):
            getattr(cpu, field_name).value = int(res[key])
    c.linux.resources.memory.SetInParent()
    if res.get("memory_limit_in_bytes"):
        c.linux.resources.memory.limit.value = int(res["memory_limit_in_bytes"])
    c.linux.cgroups_path = f"{sandbox.linux.cgroup_parent}/{cid}"
    return api.Container.FromString(c.SerializeToString())
