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

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import Topology
from nri_pinner.nri.gen import api_pb2 as api

PERIOD = 100_000
# NOT a kubelet field: the container annotation a plain containerd client sets to mark an init container
# (README "How Kubernetes intent is read"; nri_pinner/service/core/intent.py CONTAINER_TYPE_OVERRIDE)
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

