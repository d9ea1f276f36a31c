"""What Kubernetes meant: QoS, CPU request/limit and init-ness reconstructed from NRI data.

NRI carries no QoS class or resource requests, so (like nri-plugins and cri-resource-manager) we
invert what the kubelet wrote into the CRI request:
- QoS from the pod's cgroup parent (cgroupfs `/kubepods/burstable/pod<uid>` or systemd
  `/kubepods.slice/kubepods-burstable.slice/...`): "besteffort" → BestEffort, "burstable" →
  Burstable, any other kubepods parent → Guaranteed; no kubepods parent → not a kubelet pod.
- request from cpu.shares (shares*1000/1024, rounded; 2 shares = 0), limit from quota/period.
- init containers: nothing the kubelet sends says which containers are init containers (v1.32
  pkg/kubelet/kuberuntime/labels.go newContainerLabels/newContainerAnnotations write the pod and
  container names, uid, hash, restart count, termination message and ports, no container type).
  What can tell, in this order: the pod annotations INIT_ANNOTATION / SIDECAR_ANNOTATION (overrides),
  the container annotation `io.kubernetes.container.type` ("init" | "container", an override for
  plain containerd users; no kubelet writes it), the `initContainers` / `containers` maps of
  `noderesource.dev/resources` (containers/nri-plugins' resource-annotator webhook). Otherwise the
  role stays undecided (``role == ""``) and the service decides it when it matters, when the container
  stops (`edge/plugin.py`: PodResources List, else inferred). An init container still running
  when an app container of its pod is created is a sidecar (regular init containers have exited).
- exact requests: pod annotation `nri-pinner.io/cpu.<name>` (README), else the container's entry in
  `noderesource.dev/resources` when it agrees with the cgroup values the kubelet derived from it,
  else the inference above.
- pods with pod-level resources (`spec.resources`, KEP-2837): the kubelet's CPU and Memory Managers
  skip them (v1.34-v1.36), so their containers get no exclusive CPUs or memory (``pod_level``, the
  request read as 0). What one container's data proves is decided here (``pod_level_signal``);
  what only its pod's other containers reveal, in pod_level.py.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..engine.cpuset import MAX_CPUS
from ..engine.qos import QoS
from .own_requests import memory_bytes, own_cpus

GUARANTEED, BURSTABLE, BESTEFFORT, UNMANAGED = QoS.GUARANTEED, QoS.BURSTABLE, QoS.BEST_EFFORT, QoS.UNMANAGED

ANNOTATION_PREFIX = "nri-pinner.io/"
CPU_ANNOTATION = ANNOTATION_PREFIX + "cpu."  # + container name: "<request>[/<limit>]", e.g. "2" or "500m/1"
# on the container, or "nri-pinner.io/exclusive-cpus.<name>" on the pod
EXCLUSIVE_ANNOTATION = ANNOTATION_PREFIX + "exclusive-cpus"
INIT_ANNOTATION = ANNOTATION_PREFIX + "init-containers"  # "a,b"
SIDECAR_ANNOTATION = ANNOTATION_PREFIX + "sidecar-containers"  # restartable init containers: "c"
# "true": the pod sets spec.resources (pod-level resources); nothing the kubelet sends says so (README)
POD_LEVEL_ANNOTATION = ANNOTATION_PREFIX + "pod-level-resources"
# A plain-containerd client's per-container override ("init" | "container", README). Not a kubelet field:
# the kubelet writes no container type (v1.32 kuberuntime/labels.go:96-147), whatever the key's prefix says.
CONTAINER_TYPE_OVERRIDE = "io.kubernetes.container.type"
# containers/nri-plugins pkg/kubernetes/resources.go AnnotatedResourcesKey / AnnotatedResources:
# JSON {"initContainers": {name: ResourceRequirements}, "containers": {name: ResourceRequirements}},
# written on the pod by cmd/resource-annotator/webhook.go annotateResources from pod.Spec
NODE_RESOURCES_ANNOTATION = "noderesource.dev/resources"

MIN_SHARES = 2
SHARES_PER_CPU = 1024
MIN_QUOTA = 1000  # kubelet minQuotaPeriod (µs)


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
    source: str = "cgroup"  # "cgroup" (inferred), "annotation" (exact), "exclusive-annotation", "noderesource"
    # who decided init/app: "annotation" (nri-pinner), "container-type", "noderesource", "podresources",
    # "inferred" (at a stop, edge/plugin.py), "checkpoint"; "" = undecided (taken as app until it stops)
    role: str = ""
    kubelet: bool = False  # a kubelet pod (kubepods cgroup parent): exited containers keep their CPUs
    note: str = ""  # a problem with data we do not own (noderesource.dev/resources): logged, not fatal
    memory_limit: int = 0  # bytes (linux.resources.memory.limit), 0 = none: pod_level.py sums them
    # why its pod is taken to use pod-level resources ("" = not known to): the kubelet's CPU and
    # Memory Managers skip such a pod, so request_milli is 0 and no memory is asked (pod_level.py)
    pod_level: str = ""
    # its own data proves own CPU and memory requests = limits, whole CPUs: what the gated kubelet pins
    own_milli: int = 0  # in a pod with pod-level resources (own_requests.py); 0 = not proven

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


class NodeResourcesError(ValueError):
    """`noderesource.dev/resources` that cannot be read: logged, the values are inferred instead."""


@dataclass(frozen=True)
class AnnotatedCPU:
    request_milli: int
    limit_milli: int  # 0: no limit
    memory_limit: bool = True  # the container's spec has limits.memory
    memory_request_bytes: int = 0  # its requests.memory (its limit when left out), 0 = not read
    memory_limit_bytes: int = 0


@dataclass(frozen=True)
class NodeResources:
    """One pod's `noderesource.dev/resources`: CPU per container name, init containers apart."""

    init: Mapping[str, AnnotatedCPU | NodeResourcesError]
    app: Mapping[str, AnnotatedCPU | NodeResourcesError]


def _quantity(value: Any, where: str) -> int:
    # resource.Quantity marshals as a string; its UnmarshalJSON also takes a bare number
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise NodeResourcesError(f"{where}: expected a quantity string, got {quoted(repr(value))}")
    try:
        return parse_cpu_quantity(str(value))
    except IntentError as exc:
        raise NodeResourcesError(f"{where}: {exc}") from None


def _annotated_cpu(name: str, req: Any) -> AnnotatedCPU | NodeResourcesError:
    """corev1.ResourceRequirements → CPU request/limit (a request left out defaults to the limit,
    as the API server's defaulting does before admission webhooks run)."""
    try:
        if not isinstance(req, Mapping):
            raise NodeResourcesError(f"container {quoted(name)}: expected an object, got {quoted(repr(req))}")
        limits, requests = req.get("limits") or {}, req.get("requests") or {}
        if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
            raise NodeResourcesError(f"container {quoted(name)}: limits/requests must be objects")
        limit = _quantity(limits["cpu"], f"container {quoted(name)} limits.cpu") if "cpu" in limits else 0
        request = (_quantity(requests["cpu"], f"container {quoted(name)} requests.cpu") if "cpu" in requests
                   else limit)
        memory = memory_bytes(limits.get("memory"))
        return AnnotatedCPU(request, limit, "memory" in limits,
                            memory_bytes(requests["memory"]) if "memory" in requests else memory, memory)
    except NodeResourcesError as exc:
        return exc


@functools.lru_cache(maxsize=256)  # a pod's containers share the text
def parse_node_resources(text: str) -> NodeResources:
    """Raises NodeResourcesError when the document itself cannot be read; a bad entry is kept as
    its error (that container falls back to inference, its siblings do not)."""
    if len(text) > 1 << 20:
        raise NodeResourcesError(f"{NODE_RESOURCES_ANNOTATION}: {len(text)} bytes, more than 1 MiB")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise NodeResourcesError(f"{NODE_RESOURCES_ANNOTATION}: not JSON ({exc})") from None
    if not isinstance(doc, Mapping):
        raise NodeResourcesError(f"{NODE_RESOURCES_ANNOTATION}: expected a JSON object, got {type(doc).__name__}")
    maps = []
    for field_name in ("initContainers", "containers"):
        m = doc.get(field_name) or {}
        if not isinstance(m, Mapping):
            raise NodeResourcesError(f"{NODE_RESOURCES_ANNOTATION}: {field_name} must be an object")
        maps.append({str(k): _annotated_cpu(str(k), v) for k, v in m.items()})
    return NodeResources(init=maps[0], app=maps[1])


def milli_to_shares(milli: int) -> int:
    """kubelet MilliCPUToShares (pkg/kubelet/cm/helpers_linux.go): floor, at least 2, at most 262144."""
    return 2 if milli == 0 else min(max(milli * SHARES_PER_CPU // 1000, MIN_SHARES), 262_144)


def milli_to_quota(milli: int, period: int) -> int:
    """kubelet MilliCPUToQuota: milli * period / 1000, at least 1000 (MinQuotaPeriod)."""
    return 0 if milli == 0 else max(milli * period // 1000, 1000)


def _agrees(cpu: Any, annotated: AnnotatedCPU) -> str:
    """Why the annotated values are not what the kubelet put into this container ("" = they are):
    a stale annotation (resized pod) or a hand-written one never beats the cgroup values."""
    if cpu.HasField("shares") and milli_to_shares(annotated.request_milli) != int(cpu.shares.value):
        return (f"requests.cpu {annotated.request_milli}m disagrees with the container's cpu.shares "
                f"{int(cpu.shares.value)}")
    quota, period = _opt(cpu, "quota"), _opt(cpu, "period")
    if quota > 0 and period > 0 and milli_to_quota(annotated.limit_milli, period) != quota:
        return f"limits.cpu {annotated.limit_milli}m disagrees with the container's CFS quota {quota}/{period}"
    return ""


def intent_from_nri(pod: Any, container: Any) -> ContainerIntent:
    """Build the intent from an NRI PodSandbox and Container (protobuf messages)."""
    pod_ann = pod.annotations
    name = container.name
    qos = qos_from_cgroup_parent(pod.linux.cgroup_parent)
    kubelet = qos != UNMANAGED
    cpu = container.linux.resources.cpu
    request = shares_to_milli(_opt(cpu, "shares"))
    limit = cpu_limit_milli(cpu)
    source, role, init, note = "cgroup", "", False, ""
    annotated: AnnotatedCPU | NodeResourcesError | None = None
    text = pod_ann.get(NODE_RESOURCES_ANNOTATION)
    if text is not None:
        try:
            resources = parse_node_resources(text)
            if name in resources.init:
                annotated, role, init = resources.init[name], "noderesource", True
            elif name in resources.app:
                annotated, role = resources.app[name], "noderesource"
        except NodeResourcesError as exc:
            annotated = exc
    memory_limit = _memory_limit(container.linux.resources)
    pod_level = pod_level_signal(pod_ann, qos)
    if isinstance(annotated, NodeResourcesError):
        note = f"{annotated}; CPU request/limit inferred from the cgroup values"
    elif annotated is not None and kubelet and _inherits_pod_limits(cpu, memory_limit, annotated):
        pod_level = pod_level or "noderesource"  # the cgroup values are the kubelet's from spec.resources
    elif annotated is not None:
        why = _agrees(cpu, annotated)
        if why:
            note = f"{NODE_RESOURCES_ANNOTATION} for container {quoted(name)}: {why}; using the cgroup values"
        else:
            request, limit, source = annotated.request_milli, annotated.limit_milli, "noderesource"
    if qos == GUARANTEED and not pod_level and (
            request != limit if source == "noderesource" and limit else _request_below_limit(cpu)):
        pod_level = "request-below-limit"
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

    kind = container.annotations.get(CONTAINER_TYPE_OVERRIDE)
    if kind in ("init", "container"):  # a plain-containerd client's override: no kubelet writes it
        init, role = kind == "init", "container-type"
    sidecars = _names(pod_ann, SIDECAR_ANNOTATION)
    inits = _names(pod_ann, INIT_ANNOTATION) | sidecars
    if name in inits:
        init, role = True, "annotation"
    if source == "exclusive-annotation":  # a plain-containerd client asked for exclusive CPUs itself
        pod_level = ""
    spec = annotated if isinstance(annotated, AnnotatedCPU) else AnnotatedCPU(0, 0)
    own = own_cpus(source, request, limit, memory_request=spec.memory_request_bytes, quota_milli=cpu_limit_milli(cpu),
                   memory_limit=spec.memory_limit_bytes, cgroup_memory=memory_limit,
                   pod_memory=_memory_limit(pod.linux.pod_resources)) if kubelet and qos == GUARANTEED else 0
    return ContainerIntent(
        pod_uid=pod.uid, pod_name=pod.name, namespace=pod.namespace, container=name,
        container_id=container.id, qos=qos, request_milli=0 if pod_level else request, limit_milli=limit,
        init=init, restartable=name in sidecars, source=source, role=role, kubelet=kubelet, note=note,
        memory_limit=memory_limit, pod_level=pod_level, own_milli=own,
    )


def pod_level_signal(annotations: Any, qos: QoS) -> str:
    """``"annotation"`` when the pod says it uses pod-level resources (POD_LEVEL_ANNOTATION), else "".
    Only a kubelet pod can (the kubelet's managers are what skip it); any value but "true" is refused."""
    text = annotations.get(POD_LEVEL_ANNOTATION)
    if text is None or qos == UNMANAGED:
        return ""
    if text.strip().lower() != "true":
        raise IntentError(f"annotation {POD_LEVEL_ANNOTATION}={quoted(text)}: the only value is \"true\"")
    return "annotation"


def _memory_limit(resources: Any) -> int:
    mem = resources.memory
    return max(0, int(mem.limit.value)) if mem.HasField("limit") else 0


def _inherits_pod_limits(cpu: Any, memory_limit: int, annotated: AnnotatedCPU) -> bool:
    """The kubelet gave the container a limit its spec (as the resource annotator copied it) does not
    have: only spec.resources' can be (kubelet v1.32.10 kuberuntime_container_linux.go:100-125
    getCPULimit / getMemoryLimit; unchanged through v1.36)."""
    return (annotated.limit_milli == 0 and _opt(cpu, "quota") > 0) or (not annotated.memory_limit and memory_limit > 0)


def _request_below_limit(cpu: Any) -> bool:
    """CPU request (shares) other than the limit (quota) in a Guaranteed pod: without pod-level
    resources every container of one has request = limit (qos.go ComputePodQOS). One millicore of
    slack either way: another CFS period rounds the quota; the 1 ms minimum quota tells nothing."""
    quota, period = _opt(cpu, "quota"), _opt(cpu, "period")
    if quota <= MIN_QUOTA or period <= 0 or not cpu.HasField("shares"):
        return False
    limit = quota_to_milli(quota, period)
    return not milli_to_shares(max(limit - 1, 0)) <= int(cpu.shares.value) <= milli_to_shares(limit + 1)
