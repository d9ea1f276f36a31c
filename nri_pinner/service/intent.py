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

import functools
import re
from dataclasses import dataclass
from typing import Any

from ..engine.cpuset import MAX_CPUS
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


@functools.lru_cache(maxsize=4096)  # a pod's containers share it: Synchronize asks once per container
def qos_from_cgroup_parent(parent: str) -> QoS:
    parts = [p for p in re.split(r"[/]", parent.lower()) if p]
    if not any(p.startswith("kubepods") for p in parts):
        return UNMANAGED
    if any("besteffort" in p for p in parts):
        return BESTEFFORT
    if any("burstable" in p for p in parts):
        return BURSTABLE
    return GUARANTEED


# ASCII digits only: "inf", "nan", "1e999", "²" and 5000-digit numbers never reach int()/float()
_QUANTITY = re.compile(r"([0-9]{0,7})(?:\.([0-9]{1,9}))?|([0-9]{1,10})m", re.ASCII)
MAX_MILLI = MAX_CPUS * 1000  # no node has more CPUs than the kernel's NR_CPUS ceiling


def quoted(value: str, limit: int = 40) -> str:
    """A hostile value, quoted and cut short for messages."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."


def parse_cpu_quantity(text: str) -> int:
    """Kubernetes CPU quantity → millicores: "2", "0.5", "1500m"."""
    t = text.strip()
    if t.startswith("-") and _QUANTITY.fullmatch(t[1:]):
        raise IntentError(f"negative CPU quantity {quoted(text)}")
    m = _QUANTITY.fullmatch(t)
    if m is None or t in ("", "."):
        raise IntentError(f"bad CPU quantity {quoted(text)} (expected e.g. 2, 0.5 or 1500m)")
    whole, fraction, milli = m.groups()
    if milli is not None:
        value = int(milli)
    else:  # "0.0005" rounds as float() did, without float()
        value = int(whole or "0") * 1000 + (int((fraction or "0").ljust(9, "0")) + 500_000) // 1_000_000
    if value > MAX_MILLI:
        raise IntentError(f"CPU quantity {quoted(text)} exceeds {MAX_CPUS} CPUs")
    return value


def parse_exclusive_cpus(text: str) -> int:
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or len(t) > 5 or not 1 <= int(t) <= MAX_CPUS:
        raise IntentError(f"must be a positive integer (1 to {MAX_CPUS} CPUs); got {quoted(text)}")
    return int(t)


def _opt(msg: Any, field: str) -> int:
    """Value of an NRI Optional* wrapper field, 0 when absent."""
    return int(getattr(msg, field).value) if msg.HasField(field) else 0


def cpu_limit_milli(cpu: Any) -> int:
    """CPU limit of an NRI LinuxCPU (quota/period), 0 when unlimited."""
    return quota_to_milli(_opt(cpu, "quota"), _opt(cpu, "period"))


def _names(annotations: Any, key: str) -> frozenset[str]:
    return _split_names(annotations.get(key, ""))


@functools.lru_cache(maxsize=1024)
def _split_names(text: str) -> frozenset[str]:
    return frozenset(n.strip() for n in text.split(",") if n.strip())


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

    key = CPU_ANNOTATION + name
    exact = pod_ann.get(key)
    if exact is not None:
        req_s, _, lim_s = exact.partition("/")
        try:
            request = parse_cpu_quantity(req_s)
            limit = parse_cpu_quantity(lim_s) if lim_s else request
        except IntentError as exc:
            raise IntentError(f"annotation {key}={quoted(exact)}: {exc}") from None
        source = "annotation"
    key = EXCLUSIVE_ANNOTATION
    exclusive = container.annotations.get(key)
    if exclusive is None:
        key = f"{EXCLUSIVE_ANNOTATION}.{name}"
        exclusive = pod_ann.get(key)
    if exclusive is not None:
        try:
            request = limit = parse_exclusive_cpus(exclusive) * 1000
        except IntentError as exc:
            raise IntentError(f"annotation {key}={quoted(exclusive)}: {exc}") from None
        qos, source = GUARANTEED, "exclusive-annotation"

    sidecars = _names(pod_ann, SIDECAR_ANNOTATION)
    inits = _names(pod_ann, INIT_ANNOTATION) | sidecars
    return ContainerIntent(
        pod_uid=pod.uid, pod_name=pod.name, namespace=pod.namespace, container=name,
        container_id=container.id, qos=qos, request_milli=request, limit_milli=limit,
        init=name in inits or container.annotations.get(KUBELET_CONTAINER_TYPE) == "init",
        restartable=name in sidecars, source=source,
    )
