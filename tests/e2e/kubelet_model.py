"""What the kubelet puts into CRI requests, modelled on kubernetes pkg/kubelet (cgroupfs or systemd driver).

Sources (kubernetes/kubernetes): ``pkg/kubelet/cm/helpers_linux.go`` (MilliCPUToShares, milliCPUToQuota),
``pkg/kubelet/kuberuntime/kuberuntime_container_linux.go`` (calculateLinuxResources: shares from the
request, or from the limit when no request; quota only with a limit; period always 100000),
``pkg/kubelet/qos/policy.go`` (oom_score_adj), ``pkg/apis/core/v1/helper/qos`` (QoS class) and
``pkg/kubelet/kuberuntime/labels.go`` (labels / annotations).

Init containers: the kubelet gives every container the same *labels* (``io.kubernetes.pod.name``,
``io.kubernetes.pod.namespace``, ``io.kubernetes.pod.uid``, ``io.kubernetes.container.name``); what marks
an init container is the *annotation* ``io.kubernetes.container.type`` = ``"init"`` (``"container"`` for
regular containers, ``"ephemeral"`` for ephemeral ones). Restartable (sidecar) init containers are listed
in ``pod.Spec.InitContainers`` and are therefore also typed ``"init"``. Other container annotations:
``io.kubernetes.container.hash``, ``.restartCount``, ``.terminationMessagePath``,
``.terminationMessagePolicy``, ``io.kubernetes.pod.terminationGracePeriod``. A plain CRI client that omits
these annotations produces containers a plugin cannot classify as init containers.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

MIN_SHARES = 2
MAX_SHARES = 262144
SHARES_PER_CPU = 1024
QUOTA_PERIOD = 100000
MIN_QUOTA = 1000
GUARANTEED_OOM_SCORE_ADJ = -997
BESTEFFORT_OOM_SCORE_ADJ = 1000

POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"
CONTAINER_TYPE_ANNOTATION = "io.kubernetes.container.type"


class QOSClass(StrEnum):
    GUARANTEED = "guaranteed"
    BURSTABLE = "burstable"
    BESTEFFORT = "besteffort"


@dataclass(frozen=True)
class ContainerResources:
    """A container's resources as written in the pod spec (0 = not set)."""

    cpu_milli_request: int = 0
    cpu_milli_limit: int = 0
    memory_request: int = 0
    memory_limit: int = 0

    def __post_init__(self) -> None:
        for field in ("cpu_milli_request", "cpu_milli_limit", "memory_request", "memory_limit"):
            if getattr(self, field) < 0:
                raise ValueError(f"{field} must be >= 0, got {getattr(self, field)}")
        if self.cpu_milli_limit and self.cpu_milli_request > self.cpu_milli_limit:
            raise ValueError(f"cpu request {self.cpu_milli_request}m exceeds limit {self.cpu_milli_limit}m")
        if self.memory_limit and self.memory_request > self.memory_limit:
            raise ValueError(f"memory request {self.memory_request} exceeds limit {self.memory_limit}")

    def effective(self) -> ContainerResources:
        """API defaulting: a limit without a request makes the request equal the limit."""
        return ContainerResources(
            self.cpu_milli_request or self.cpu_milli_limit,
            self.cpu_milli_limit,
            self.memory_request or self.memory_limit,
            self.memory_limit,
        )


def milli_cpu_to_shares(milli_cpu: int) -> int:
    if milli_cpu == 0:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli_cpu * SHARES_PER_CPU // 1000))


def milli_cpu_to_quota(milli_cpu: int, period: int = QUOTA_PERIOD) -> int:
    if milli_cpu == 0:
        return 0
    return max(MIN_QUOTA, milli_cpu * period // 1000)


def qos_class(containers: Sequence[ContainerResources]) -> QOSClass:
    """Guaranteed: every container has cpu and memory limits equal to requests; BestEffort: none set."""
    if not containers:
        raise ValueError("a pod needs at least one container")
    eff = [c.effective() for c in containers]
    if all(
        c.cpu_milli_limit
        and c.memory_limit
        and c.cpu_milli_request == c.cpu_milli_limit
        and c.memory_request == c.memory_limit
        for c in eff
    ):
        return QOSClass.GUARANTEED
    if all(not (c.cpu_milli_request or c.cpu_milli_limit or c.memory_request or c.memory_limit) for c in eff):
        return QOSClass.BESTEFFORT
    return QOSClass.BURSTABLE


def oom_score_adj(qos: QOSClass, memory_request: int, memory_capacity: int) -> int:
    if qos is QOSClass.GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos is QOSClass.BESTEFFORT:
        return BESTEFFORT_OOM_SCORE_ADJ
    adj = 1000 - (1000 * memory_request) // memory_capacity
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    return adj - 1 if adj == BESTEFFORT_OOM_SCORE_ADJ else adj


def container_linux_resources(res: ContainerResources, qos: QOSClass, memory_capacity: int) -> dict[str, int]:
    """Fields of CRI LinuxContainerResources as the kubelet fills them for CreateContainer."""
    eff = res.effective()
    fields = {
        "cpu_shares": milli_cpu_to_shares(eff.cpu_milli_request),
        "cpu_period": QUOTA_PERIOD,
        "cpu_quota": milli_cpu_to_quota(eff.cpu_milli_limit),
        "oom_score_adj": oom_score_adj(qos, eff.memory_request, memory_capacity),
    }
    if eff.memory_limit:
        fields["memory_limit_in_bytes"] = eff.memory_limit
    return fields


def pod_linux_resources(containers: Sequence[ContainerResources]) -> dict[str, int]:
    """PodSandboxConfig.linux.resources: sums over containers; quota / memory limit only if every container
    sets one (the kubelet's pod-cgroup rule; a missing limit means the pod is unbounded)."""
    eff = [c.effective() for c in containers]
    fields = {
        "cpu_shares": milli_cpu_to_shares(sum(c.cpu_milli_request for c in eff)),
        "cpu_period": QUOTA_PERIOD,
        "cpu_quota": milli_cpu_to_quota(sum(c.cpu_milli_limit for c in eff))
        if all(c.cpu_milli_limit for c in eff)
        else 0,
    }
    if all(c.memory_limit for c in eff):
        fields["memory_limit_in_bytes"] = sum(c.memory_limit for c in eff)
    return fields


def cgroup_parent(qos: QOSClass, pod_uid: str, driver: str = "cgroupfs") -> str:
    """The kubelet's pod cgroup as it sends it in PodSandboxConfig.linux.cgroup_parent.

    kubelet v1.32 (kubeedge/kubeedge vendor/k8s.io/kubernetes/pkg/kubelet/cm/): the pod's CgroupName is
    [kubepods, <qos> (not for Guaranteed), pod<uid>] (pod_container_manager_linux.go
    GetPodContainerName, qos_container_manager_linux.go); cgroup_manager_linux.go Name() spells it
    ToCgroupfs() ("/kubepods/burstable/pod<uid>") or, with the systemd driver, ToSystemd(): each part's
    "-" escaped to "_" (escapeSystemdCgroupName), joined by "-" + ".slice", then runc's ExpandSlice
    ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice"). containerd keeps
    the last element as the scope's slice."""
    parts = ["kubepods"] + ([] if qos is QOSClass.GUARANTEED else [qos.value]) + [f"pod{pod_uid}"]
    if driver == "cgroupfs":
        return "/" + "/".join(parts)
    if driver != "systemd":
        raise ValueError(f"unknown cgroup driver {driver!r}")
    return expand_slice("-".join(p.replace("-", "_") for p in parts) + ".slice")


def expand_slice(slice_name: str) -> str:
    """runc libcontainer/cgroups/systemd ExpandSlice: "a-b-c.slice" -> "/a.slice/a-b.slice/a-b-c.slice"."""
    stem = slice_name.removesuffix(".slice")
    if stem == slice_name or "/" in stem or not stem:
        raise ValueError(f"not a slice name: {slice_name!r}")
    if stem == "-":
        return "/"
    path, prefix = "", ""
    for component in stem.split("-"):
        if not component:
            raise ValueError(f"invalid slice name {slice_name!r}")
        path += f"/{prefix}{component}.slice"
        prefix += component + "-"
    return path


def pod_labels(name: str, namespace: str, uid: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**(extra or {}), POD_NAME_LABEL: name, POD_NAMESPACE_LABEL: namespace, POD_UID_LABEL: uid}


def container_labels(pod_name: str, pod_namespace: str, pod_uid: str, container_name: str) -> dict[str, str]:
    return {
        POD_NAME_LABEL: pod_name,
        POD_NAMESPACE_LABEL: pod_namespace,
        POD_UID_LABEL: pod_uid,
        CONTAINER_NAME_LABEL: container_name,
    }


def container_annotations(container_name: str, *, init: bool, restart_count: int = 0) -> dict[str, str]:
    # The real hash covers the whole v1.Container; a stable hash of the name serves the same role here.
    return {
        "io.kubernetes.container.hash": format(zlib.crc32(container_name.encode()), "x"),
        "io.kubernetes.container.restartCount": str(restart_count),
        "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
        "io.kubernetes.container.terminationMessagePolicy": "File",
        "io.kubernetes.pod.terminationGracePeriod": "30",
        CONTAINER_TYPE_ANNOTATION: "init" if init else "container",
    }
