"""The kubelet's resource arithmetic for CRI requests: QoS class, cpu shares/quota, oom_score_adj, the
sandbox's and each container's LinuxContainerResources, the pod's cgroup parent (cgroupfs and systemd).

Derived line by line from the kubelet v1.32 source as kubeedge/kubeedge vendors it (go.mod:
k8s.io/kubernetes v1.32.10, replaced by github.com/kubeedge/kubernetes v1.32.10-kubeedge1; read at
kubeedge commit 16cd8548eedb). Citations ``file.go:N`` are under ``vendor/k8s.io/kubernetes/pkg/``
there: ``kubelet/cm/...``, ``kubelet/kuberuntime/...``, ``kubelet/qos/...``, ``apis/core/...``; other
vendored modules are named in full (``k8s.io/component-helpers/...``, ``github.com/opencontainers/runc/...``).

Request dicts use the CRI proto field names (runtime.v1 api.proto); a scalar the kubelet leaves at its
zero value is left out (proto3 does not send it), a message it sets is present even when empty.
What the kubelet puts into whole requests (labels, annotations, sandbox and container config): kubelet_pod.py;
the order of its calls: kubelet_sync.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

MIN_SHARES = 2  # kubelet/cm/helpers_linux.go:41
MAX_SHARES = 262144  # :42
SHARES_PER_CPU = 1024  # :44
QUOTA_PERIOD = 100000  # kubelet/kuberuntime/helpers_linux.go:31 (quotaPeriod; CPUCFSQuotaPeriod gate off)
MIN_QUOTA = 1000  # kubelet/kuberuntime/helpers_linux.go:35 (minQuotaPeriod)
GUARANTEED_OOM_SCORE_ADJ = -997  # kubelet/qos/policy.go:33
BESTEFFORT_OOM_SCORE_ADJ = 1000  # kubelet/qos/policy.go:34


class QOSClass(StrEnum):
    GUARANTEED = "guaranteed"
    BURSTABLE = "burstable"
    BESTEFFORT = "besteffort"


@dataclass(frozen=True)
class ContainerResources:
    """A container's cpu/memory as written in the pod spec (0 = not set). Only cpu and memory count for
    QoS (apis/core/v1/helper/qos/qos.go:28); other resources are not modelled."""

    cpu_milli_request: int = 0
    cpu_milli_limit: int = 0
    memory_request: int = 0
    memory_limit: int = 0

    def __post_init__(self) -> None:
        for name in ("cpu_milli_request", "cpu_milli_limit", "memory_request", "memory_limit"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.cpu_milli_limit and self.cpu_milli_request > self.cpu_milli_limit:
            raise ValueError(f"cpu request {self.cpu_milli_request}m exceeds limit {self.cpu_milli_limit}m")
        if self.memory_limit and self.memory_request > self.memory_limit:
            raise ValueError(f"memory request {self.memory_request} exceeds limit {self.memory_limit}")

    def effective(self) -> ContainerResources:
        """API defaulting: a limit without a request sets the request to the limit
        (apis/core/v1/defaults.go:173-184 containers, :209-219 init containers)."""
        return ContainerResources(
            self.cpu_milli_request or self.cpu_milli_limit,
            self.cpu_milli_limit,
            self.memory_request or self.memory_limit,
            self.memory_limit,
        )

    @property
    def has_cpu_request(self) -> bool:
        """Whether ``requests.cpu`` exists after defaulting (the kubelet tells nil from 0 by the map key)."""
        return bool(self.cpu_milli_request or self.cpu_milli_limit)


@dataclass(frozen=True)
class Node:
    """What the kubelet's requests depend on besides the pod: machine facts and kubelet configuration."""

    memory_capacity: int  # cadvisor MachineInfo.MemoryCapacity (/proc/meminfo MemTotal): oom_score_adj
    cgroup_driver: str = "cgroupfs"  # kubelet cgroupDriver: "cgroupfs" | "systemd"
    cgroup_v2: bool = False  # libcontainercgroups.IsCgroup2UnifiedMode()
    # kubelet/kuberuntime/kuberuntime_container_linux.go:376-401 swapControllerAvailable: v1
    # memory/memory.memsw.limit_in_bytes, v2 memory.swap.max in the kubelet's own cgroup
    swap_controller: bool = False
    # runc libcontainer/cgroups/utils.go:296-360 HugePageSizes: /sys/kernel/mm/hugepages in readdir order
    hugepage_sizes: tuple[str, ...] = ()
    # CPUs with /sys/devices/system/cpu/cpu<N>/thermal_throttle (securitycontext/util.go:212-217)
    thermal_throttle_cpus: tuple[int, ...] = ()
    resolv_conf: str = ""  # the text of the kubelet's resolvConf (default /etc/resolv.conf)
    pod_logs_dir: str = "/var/log/pods"  # kubelet podLogsDir
    single_process_oom_kill: bool | None = None  # kubelet singleProcessOOMKill (unset by default)

    def __post_init__(self) -> None:
        if self.cgroup_driver not in ("cgroupfs", "systemd"):
            raise ValueError(f"unknown cgroup driver {self.cgroup_driver!r}")
        if self.memory_capacity <= 0:
            raise ValueError("memory_capacity must be > 0")

    @property
    def oom_group(self) -> bool:
        """memory.oom.group=1 is sent on cgroup v2 unless singleProcessOOMKill (kubelet.go:621-631: v1
        forces it true, v2 defaults it false; kuberuntime_container_linux.go:283-290)."""
        return self.cgroup_v2 and not self.single_process_oom_kill


def milli_cpu_to_shares(milli_cpu: int) -> int:
    """kubelet/cm/helpers_linux.go:88-104 MilliCPUToShares."""
    if milli_cpu == 0:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli_cpu * SHARES_PER_CPU // 1000))


def milli_cpu_to_quota(milli_cpu: int, period: int = QUOTA_PERIOD) -> int:
    """kubelet/kuberuntime/helpers_linux.go:40-60 milliCPUToQuota: 0 stays 0 (no limit), else at least 1 ms."""
    if milli_cpu == 0:
        return 0
    return max(MIN_QUOTA, milli_cpu * period // 1000)


def qos_class(containers: Sequence[ContainerResources]) -> QOSClass:
    """apis/core/v1/helper/qos/qos.go:92-174 ComputePodQOS over app *and* init containers (:113-116):
    BestEffort when nothing is set; Guaranteed when every container has cpu and memory limits (:151-153)
    and the summed requests equal the summed limits (:161-172); else Burstable."""
    if not containers:
        raise ValueError("a pod needs at least one container")
    eff = [c.effective() for c in containers]
    requests = {"cpu": sum(c.cpu_milli_request for c in eff), "memory": sum(c.memory_request for c in eff)}
    limits = {"cpu": sum(c.cpu_milli_limit for c in eff), "memory": sum(c.memory_limit for c in eff)}
    if not any(requests.values()) and not any(limits.values()):
        return QOSClass.BESTEFFORT
    every_limit = all(c.cpu_milli_limit and c.memory_limit for c in eff)
    if every_limit and requests == limits:
        return QOSClass.GUARANTEED
    return QOSClass.BURSTABLE


def oom_score_adj(
    qos: QOSClass, memory_request: int, memory_capacity: int, *, sidecar_floor_request: int | None = None
) -> int:
    """kubelet/qos/policy.go:45-120 GetContainerOOMScoreAdjust (no node-critical pods, no pod-level
    resources: the PodLevelResources gate is off in v1.32, features/versioned_kube_features.go:603-605).
    ``sidecar_floor_request``: for a restartable init container, the smallest memory request of the pod's
    app containers (:89-108 with qos/helpers.go:36-44): a sidecar never scores above its app containers."""
    if qos is QOSClass.GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ  # :52-54
    if qos is QOSClass.BESTEFFORT:
        return BESTEFFORT_OOM_SCORE_ADJ  # :55-56
    adj = 1000 - (1000 * memory_request) // memory_capacity  # :84
    if sidecar_floor_request is not None:
        adj = min(adj, 1000 - (1000 * sidecar_floor_request) // memory_capacity)  # :102-107
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ:  # :112-114
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    return adj - 1 if adj == BESTEFFORT_OOM_SCORE_ADJ else adj  # :116-118


def calculate_linux_resources(cpu_request: int | None, cpu_limit: int, memory_limit: int, node: Node) -> dict[str, Any]:
    """kubelet/kuberuntime/kuberuntime_container_linux.go:247-292 calculateLinuxResources; ``cpu_request``
    None = no ``requests.cpu`` key (shares then come from the limit, :256-257)."""
    out: dict[str, Any] = {}
    out["cpu_period"] = QUOTA_PERIOD  # :268-279 (cpuCFSQuota defaults true): the period is always sent
    quota = milli_cpu_to_quota(cpu_limit)  # :277
    if quota:
        out["cpu_quota"] = quota
    out["cpu_shares"] = milli_cpu_to_shares(cpu_limit if cpu_request is None else cpu_request)  # :256-263
    if memory_limit:
        out["memory_limit_in_bytes"] = memory_limit  # :264-266
    if node.oom_group:
        out["unified"] = {"memory.oom.group": "1"}  # :283-290
    return out


def container_linux_resources(
    res: ContainerResources,
    qos: QOSClass,
    node: Node,
    *,
    sidecar_floor_request: int | None = None,
    level: PodLevel | None = None,
) -> dict[str, Any]:
    """LinuxContainerResources of CreateContainer (and UpdateContainerResources): kuberuntime_container_linux.go
    :127-194 generateLinuxContainerResources with the MemoryQoS gate off (alpha) and no swap beyond NoSwap.
    ``level``: the pod's spec.resources (PodLevel.defaulted); the limits then come from ``PodLevel.limits``."""
    eff = res.effective()
    cpu_limit, memory_limit = level.limits(eff) if level is not None else (eff.cpu_milli_limit, eff.memory_limit)
    out = calculate_linux_resources(
        eff.cpu_milli_request if res.has_cpu_request else None, cpu_limit, memory_limit, node
    )  # :129-136
    out["oom_score_adj"] = oom_score_adj(
        qos, eff.memory_request, node.memory_capacity, sidecar_floor_request=sidecar_floor_request
    )  # :138-139
    if node.hugepage_sizes:  # :141, :295-333: every page size of the host, limit 0 (no hugepages requested)
        out["hugepage_limits"] = [{"page_size": size} for size in node.hugepage_sizes]
    # :198-231 configureContainerSwapResources: without the swap controller nothing; otherwise NoSwap
    # (memorySwapBehavior "" and NodeSwap on by default, features/versioned_kube_features.go:561-565)
    if node.swap_controller:
        if node.cgroup_v2:
            out.setdefault("unified", {})["memory.swap.max"] = "0"  # :443, :446-457
        elif memory_limit:  # the limit sent, the pod's for a container without one (:438)
            out["memory_swap_limit_in_bytes"] = memory_limit  # :433-440 (a 0 limit sends 0: left out)
    return out


@dataclass(frozen=True)
class PodContainers:
    """The pod's containers as the resource sums see them (init order matters for sidecars)."""

    apps: tuple[ContainerResources, ...]
    inits: tuple[tuple[ContainerResources, bool], ...] = field(default=())  # (resources, restartable)


def _pod_totals(pod: PodContainers, which: str) -> tuple[int, int, bool]:
    """k8s.io/component-helpers/resource/helpers.go AggregateContainerRequests (:142-215) or
    AggregateContainerLimits (:265-328) for cpu and memory: the app containers' sum plus every sidecar,
    or the largest init-time use (an init container plus the sidecars started before it), whichever is
    larger. Returns (cpu milli, memory, whether any container had the cpu key)."""

    def pick(c: ContainerResources) -> tuple[int, int, bool]:
        e = c.effective()
        if which == "requests":
            return e.cpu_milli_request, e.memory_request, c.has_cpu_request
        return e.cpu_milli_limit, e.memory_limit, bool(e.cpu_milli_limit)

    cpu = mem = 0
    cpu_key = False
    for c in pod.apps:  # :153-175, :276-293
        p = pick(c)
        cpu, mem, cpu_key = cpu + p[0], mem + p[1], cpu_key or p[2]
    side_cpu = side_mem = init_cpu = init_mem = 0
    for c, restartable in pod.inits:  # :187-211, :304-324
        p = pick(c)
        cpu_key = cpu_key or p[2]
        if restartable:
            cpu, mem = cpu + p[0], mem + p[1]
            side_cpu, side_mem = side_cpu + p[0], side_mem + p[1]
            use = (side_cpu, side_mem)
        else:
            use = (p[0] + side_cpu, p[1] + side_mem)
        init_cpu, init_mem = max(init_cpu, use[0]), max(init_mem, use[1])
    return max(cpu, init_cpu), max(mem, init_mem), cpu_key  # :213, :326


def sandbox_linux_resources(pod: PodContainers, node: Node, level: PodLevel | None = None) -> dict[str, Any]:
    """PodSandboxConfig.linux.resources: kubelet/kuberuntime/kuberuntime_sandbox_linux.go:46-59
    calculateSandboxResources = calculateLinuxResources(PodRequests cpu (nil without a cpu key, :54-57),
    PodLimits cpu, PodLimits memory), overhead excluded (:48). A container without a limit adds nothing to
    PodLimits (helpers.go:331-340 addResourceList over the limits that exist): the quota is the sum of
    the limits that are set, not "unlimited" as the pod cgroup (cm/helpers_linux.go:124-200) makes it.
    ``level`` (spec.resources, defaulted): SkipPodLevelResources is false with the gate on (:49-50), and
    PodRequests / PodLimits put the pod-level value in place of the containers' for each of cpu and
    memory the pod sets (k8s.io/component-helpers/resource/helpers.go:120-129, :237-246)."""
    req_cpu, _, req_cpu_key = _pod_totals(pod, "requests")
    lim_cpu, lim_mem, _ = _pod_totals(pod, "limits")
    if level is not None:
        req_cpu, req_cpu_key = (level.cpu_milli_request, True) if level.cpu_request_set else (req_cpu, req_cpu_key)
        lim_cpu = level.cpu_milli_limit or lim_cpu
        lim_mem = level.memory_limit or lim_mem
    return calculate_linux_resources(req_cpu if req_cpu_key else None, lim_cpu, lim_mem, node)


# -- pod-level resources (KEP-2837: pod.spec.resources) -------------------------------------------
# The gate PodLevelResources: alpha, off, in v1.32-v1.33 (features/versioned_kube_features.go:603-605 in
# v1.32.10); beta and on by default from v1.34 (kubernetes#132999, CHANGELOG-1.34.md "Graduated
# `PodLevelResources` feature to beta and have it on by default"). The rules below are the gate-on
# paths of v1.32.10, cited there; the kubelet of v1.33 (the pod-level paths of kuberuntime_container_linux.go
# read in the source index) has them unchanged, and CHANGELOG-1.34 lists no change to them (its pod-level
# entries: hugepages at pod level, kubernetes#131089, not modelled; the Downward API, #132605, not sent
# in CRI). The v1.34-v1.36 kuberuntime files themselves were not in the source index.


@dataclass(frozen=True)
class PodLevel:
    """pod.spec.resources as written: cpu and memory only (hugepages at pod level, v1.34+, are not
    modelled); 0 = not set."""

    cpu_milli_request: int = 0
    cpu_milli_limit: int = 0
    memory_request: int = 0
    memory_limit: int = 0
    cpu_request_set: bool = False  # requests.cpu exists (after defaulting)

    def defaulted(self, containers: PodContainers) -> PodLevel:
        """apis/core/v1/defaults.go:224-226 (after the containers' own defaulting), :460-499
        defaultPodRequests: only when pod-level limits are set (:466-468); a request the pod leaves out
        is the containers' aggregate requests when any container requests it (:478-485), else the
        pod-level limit (:487-494)."""
        if not (self.cpu_milli_limit or self.memory_limit):
            return replace(self, cpu_request_set=bool(self.cpu_milli_request))
        cpu, mem, cpu_key = _pod_totals(containers, "requests")
        mem_key = any(c.effective().memory_request for c in (*containers.apps, *(i for i, _ in containers.inits)))
        cpu_req, cpu_set = self.cpu_milli_request, bool(self.cpu_milli_request)
        if not cpu_set and (cpu_key or self.cpu_milli_limit):
            cpu_req, cpu_set = (cpu if cpu_key else self.cpu_milli_limit), True
        mem_req = self.memory_request or (mem if mem_key else self.memory_limit)
        return PodLevel(cpu_req, self.cpu_milli_limit, mem_req, self.memory_limit, cpu_set)

    def validate(self, containers: PodContainers) -> None:
        """apis/core/validation/validation.go:4323-4370 validatePodResourceConsistency: pod-level requests
        at least the containers' aggregate requests (:4345-4354); each app container's limit at most the
        pod's (:4356-4368)."""
        cpu, mem, _ = _pod_totals(containers, "requests")
        if (self.cpu_request_set and cpu > self.cpu_milli_request) or (
                self.memory_request and mem > self.memory_request):
            raise ValueError("pod-level requests must be >= the containers' aggregate requests")
        for c in containers.apps:
            e = c.effective()
            if (self.cpu_milli_limit and e.cpu_milli_limit > self.cpu_milli_limit) or (
                    self.memory_limit and e.memory_limit > self.memory_limit):
                raise ValueError("a container's limit must be <= the pod-level limit")

    def qos(self) -> QOSClass:
        """apis/core/v1/helper/qos/qos.go:97-110: with pod-level resources the QoS class is theirs alone
        (the containers' are not read, :111-155); Guaranteed needs cpu and memory limits (:107-110) and
        requests equal to them (:157-171)."""
        requests = {"cpu": self.cpu_milli_request, "memory": self.memory_request}
        limits = {"cpu": self.cpu_milli_limit, "memory": self.memory_limit}
        if not any(requests.values()) and not any(limits.values()):
            return QOSClass.BESTEFFORT  # :157-158
        if self.cpu_milli_limit and self.memory_limit and requests == limits:
            return QOSClass.GUARANTEED
        return QOSClass.BURSTABLE

    def limits(self, eff: ContainerResources) -> tuple[int, int]:
        """The CPU and memory limits a container's LinuxContainerResources are computed from: its own,
        else the pod's (kubelet/kuberuntime/kuberuntime_container_linux.go:100-111 getCPULimit, :114-125
        getMemoryLimit, read by generateLinuxContainerResources :134-136). Its requests stay its own
        (:130-133): a container with neither gets shares from the pod's limit (:256-257)."""
        return eff.cpu_milli_limit or self.cpu_milli_limit, eff.memory_limit or self.memory_limit


def pod_linux_resources(containers: Sequence[ContainerResources], node: Node) -> dict[str, Any]:
    """sandbox_linux_resources for a pod of app containers only."""
    return sandbox_linux_resources(PodContainers(tuple(containers)), node)


def cgroup_parent(qos: QOSClass, pod_uid: str, driver: str = "cgroupfs") -> str:
    """PodSandboxConfig.linux.cgroup_parent (kuberuntime_sandbox.go:165-167 GetPodCgroupParent, kubelet_pods.go
    :590-594). The CgroupName is [kubepods, <qos> unless Guaranteed, pod<uid>]: cm/container_manager_linux.go:271
    with cm/node_container_manager_linux.go:41 ("kubepods"), cm/qos_container_manager_linux.go:93-94, :129-131,
    cm/pod_container_manager_linux.go:101-121 (prefix "pod", :37). cm/cgroup_manager_linux.go:172-177 Name()
    spells it ToCgroupfs (:111-113, "/kubepods/burstable/pod<uid>") or ToSystemd (:82-98): each part's "-"
    escaped to "_" (:69-71), joined by "-", ".slice", runc ExpandSlice: the *expanded* path is what is sent
    ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice")."""
    parts = ["kubepods"] + ([] if qos is QOSClass.GUARANTEED else [qos.value]) + [f"pod{pod_uid}"]
    if driver == "cgroupfs":
        return "/" + "/".join(parts)
    if driver != "systemd":
        raise ValueError(f"unknown cgroup driver {driver!r}")
    return expand_slice("-".join(p.replace("-", "_") for p in parts) + ".slice")


def expand_slice(slice_name: str) -> str:
    """github.com/opencontainers/runc/libcontainer/cgroups/systemd/common.go:62-91 ExpandSlice:
    "a-b-c.slice" -> "/a.slice/a-b.slice/a-b-c.slice"."""
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
