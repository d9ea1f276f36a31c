"""What Kubernetes meant: QoS, CPU request/limit and init-ness reconstructed from NRI data.

NRI carries no QoS class or resource requests, so (like nri-plugins and cri-resource-manager) we
invert what the kubelet wrote into the CRI request:
- QoS from the pod's cgroup parent (cgroupfs `/kubepods/burstable/pod<uid>` or systemd
  `/kubepods.slice/kubepods-burstable.slice/...`): "besteffort" → BestEffort, "burstable" →
  Burstable, any other kubepods parent → Guaranteed; no kubepods parent → not a kubelet pod.
- request from cpu.shares (shares*1000/1024, rounded; 2 shares = 0), limit from quota/period.
- init containers from the kubelet's container annotation `io.kubernetes.container.type` = "init"
  (kuberuntime/labels.go); it says "init" for restartable (sidecar) init containers too, and
  nothing else in CRI tells them apart. So: a pod annotation may name sidecars, and the service
  treats an init container that is still running when an app container of its pod is created as
  a sidecar (regular init containers have exited by then).
- exact values and explicit exclusive CPUs from pod annotations (README).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..engine.qos import QoS

GUARANTEED, BURSTABLE, BESTEFFORT, UNMANAGED = QoS.GUARANTEED, QoS.BURSTABLE, QoS.BEST_EFFORT, QoS.UNMANAGED

ANNOTATION_PREFIX = "nri-pinner.io/"
CPU_ANNOTATION = ANNOTATION_PREFIX + "cpu."  # + container name: "<request>[/<limit>]", e.g. "2" or "500m/1"
# on the container, or "nri-pinner.io/exclusive-cpus.<name>" on the pod
EXCLUSIVE_ANNOTATION = ANNOTATION_PREFIX + "exclusive-cpus"
INIT_ANNOTATION = ANNOTATION_PREFIX + "init-containers"  # "a,b"
SIDECAR_ANNOTATION = ANNOTATION_PREFIX + "sidecar-containers"  # restartable init containers: "c"
KUBELET_CONTAINER_TYPE = "io.kubernetes.container.type"  # "init" | "container" | "ephemeral"

MIN_SHARES = 2
SHARES_PER_CPU = 1024


class IntentError(ValueError):
    """An annotation we own that cannot be understood (the create fails with this message)."""


@dataclass(frozen=True)
class ContainerIntent:
    pod_uid: str
    pod_name: str
    namespace: str
    container: str
    container_id: str
    qos: QoS
    request_milli: int
    limit_milli: int
    init: bool = False
    restartable: bool = False
    source: str = "cgroup"  # "cgroup" (inferred), "annotation" (exact), "exclusive-annotation"

    @property
    def pod_key(self) -> str:
        return self.pod_uid or self.pod_name


def shares_to_milli(shares: int) -> int:
    if shares <= MIN_SHARES:
        return 0
    return (shares * 1000 + SHARES_PER_CPU // 2) // SHARES_PER_CPU


def quota_to_milli(quota: int, period: int) -> int:
    if quota <= 0 or period <= 0:
        return 0
    return (quota * 1000 + period // 2) // period


def qos_from_cgroup_parent(parent: str) -> QoS:
    parts = [p for p in re.split(r"[/]", parent.lower()) if p]
    if not any(p.startswith("kubepods") for p in parts):
        return UNMANAGED
    if any("besteffort" in p for p in parts):
        return BESTEFFORT
    if any("burstable" in p for p in parts):
        return BURSTABLE
    return GUARANTEED


def parse_cpu_quantity(text: str) -> int:
    """Kubernetes CPU quantity → millicores: "2", "0.5", "1500m"."""
    t = text.strip()
    try:
        value = int(t[:-1]) if t.endswith("m") else round(float(t) * 1000)
    except ValueError:
        raise IntentError(f"bad CPU quantity {text!r}") from None
    if value < 0:
        raise IntentError(f"negative CPU quantity {text!r}")
    return value


def _opt(msg: Any, field: str) -> int:
    """Value of an NRI Optional* wrapper field, 0 when absent."""
    return int(getattr(msg, field).value) if msg.HasField(field) else 0


def cpu_limit_milli(cpu: Any) -> int:
    """CPU limit of an NRI LinuxCPU (quota/period), 0 when unlimited."""
    return quota_to_milli(_opt(cpu, "quota"), _opt(cpu, "period"))


def _names(annotations: Any, key: str) -> set[str]:
    return {n.strip() for n in annotations.get(key, "").split(",") if n.strip()}


def intent_from_nri(pod: Any, container: Any) -> ContainerIntent:
    """Build the intent from an NRI PodSandbox and Container (protobuf messages)."""
    pod_ann = pod.annotations
    name = container.name
    qos = qos_from_cgroup_parent(pod.linux.cgroup_parent)
    cpu = container.linux.resources.cpu
    request = shares_to_milli(_opt(cpu, "shares"))
    limit = cpu_limit_milli(cpu)
    source = "cgroup"
    if qos == GUARANTEED and limit == 0:
        # Guaranteed means limit == request; the quota may be off (DisableCPUQuotaWithExclusiveCPUs)
        limit = request

    exact = pod_ann.get(CPU_ANNOTATION + name)
    if exact is not None:
        req_s, _, lim_s = exact.partition("/")
        request = parse_cpu_quantity(req_s)
        limit = parse_cpu_quantity(lim_s) if lim_s else request
        source = "annotation"
    exclusive = container.annotations.get(EXCLUSIVE_ANNOTATION)
    if exclusive is None:
        exclusive = pod_ann.get(f"{EXCLUSIVE_ANNOTATION}.{name}")
    if exclusive is not None:
        if not exclusive.strip().isdigit() or int(exclusive) < 1:
            raise IntentError(f"{EXCLUSIVE_ANNOTATION} must be a positive integer; got {exclusive!r}")
        request = limit = int(exclusive) * 1000
        qos, source = GUARANTEED, "exclusive-annotation"

    sidecars = _names(pod_ann, SIDECAR_ANNOTATION)
    inits = _names(pod_ann, INIT_ANNOTATION) | sidecars
    return ContainerIntent(
        pod_uid=pod.uid, pod_name=pod.name, namespace=pod.namespace, container=name,
        container_id=container.id, qos=qos, request_milli=request, limit_milli=limit,
        init=name in inits or container.annotations.get(KUBELET_CONTAINER_TYPE) == "init",
        restartable=name in sidecars, source=source,
    )
