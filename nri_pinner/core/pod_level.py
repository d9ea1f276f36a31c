"""Pods with pod-level resources (KEP-2837, `spec.resources`): no exclusive CPUs or memory for any of
their containers, as the kubelet of v1.34-v1.36 (the `PodLevelResources` gate on by default, the
alpha `PodLevelResourceManagers` off): its static CPU policy and static Memory Manager skip such a pod
in GetTopologyHints, GetPodTopologyHints and Allocate (kubernetes#133279, CHANGELOG-1.34 "Prevented
any type of CPU/Memory alignment or hint generation ... when pod-level resources were used").

Nothing the kubelet sends names spec.resources. What the runtime does get: the sandbox's resources
(NRI `linux.pod_resources`, the kubelet's calculateSandboxResources) are spec.resources' cpu and
memory where the pod sets them, and a container without a limit of its own is given the pod's limit
(getCPULimit / getMemoryLimit). One container's own data proves it in a few cases (intent.py
``pod_level_signal``: the pod annotation, the resource annotator's spec, a Guaranteed container
whose request is not its limit). Its siblings prove it when they cannot be an ordinary pod's: the
CPU (or memory) limits of the containers that run together exceed the pod's, which the kubelet's
PodLimits (their sum, or an init container's with the sidecars started before it) never does.
A regular init container is out of that sum by the time its pod's next container is created: its
NRI StopContainer reaches us before the kubelet can see it exit (containerd's handleContainerExit
calls task.Delete with nri.WithContainerExit, then marks the container exited; 1.7 pkg/cri/server/
events.go and 2.x internal/cri/server/events.go alike), and the kubelet creates the next container
only after it saw the exit (kuberuntime_container.go computeInitContainerActions).

The first container of such a pod can look exactly like an ordinary pod's (one container with the
pod's limit, or containers whose limits add up to it): it is admitted as one. When a later sibling
reveals the pod, every container of the pod goes to the shared pool, the earlier ones too (their
CPUs and memory are released: the kubelet never gave them any). So a pod never holds more exclusive
CPUs than its pod-level limit, and holds none once anything shows it uses pod-level resources.

With the kubelet 1.36 alpha gate `PodLevelResourceManagers` on (``gated``: the setting
`topology_manager.pod_level_resource_managers`, container scope only) the same holds except for a
container whose own data proves own CPU and memory requests = limits, whole CPUs (intent.own_milli,
own_requests.py): it keeps its exclusive CPUs and memory, as the kubelet's `guaranteedCPUs` /
`getContainerRequestedResources` give it, whether its pod was known at its create or shown later.
Its pod's cgroup then keeps no CFS quota (the kubelet's PodHasExclusiveCPUs is true: core/quotas.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from ..engine.admission_engine import AdmissionRequest
from ..engine.qos import QoS
from .intent import GUARANTEED, ContainerIntent, cpu_limit_milli
from .state import ContainerRecord, NodeState

if TYPE_CHECKING:
    from ..config import Settings

log = structlog.get_logger("nri_pinner.service")


def gate_on_in_container_scope(settings: Settings) -> bool:
    """The kubelet's PodLevelResourceManagers gate as configured (config refuses it in pod scope)."""
    tm = settings.topology_manager
    return tm.pod_level_resource_managers and tm.scope == "container"


def as_pod_level(intent: ContainerIntent, reason: str, gated: bool = False) -> ContainerIntent:
    """The container of a pod with pod-level resources: no exclusive CPUs (request read as 0), unless
    the gate is on and its own data proves it Guaranteed-equivalent (its own whole CPUs)."""
    return replace(intent, request_milli=intent.own_milli if gated else 0, pod_level=intent.pod_level or reason)


def keeps_exclusive(tr: NodeState, intent: ContainerIntent) -> bool:
    """Under the gate: does the pod of this (settled) container hold exclusive CPUs, its own included?"""
    if intent.request_milli:
        return True
    return any((a := tr.assignment(t)) is not None and a.exclusive for t in tr.containers.in_pod(intent.pod_key))


def pod_limits(pod: Any) -> tuple[int, int]:
    """The sandbox's CPU limit (millicores) and memory limit (bytes), 0 where unset."""
    res = pod.linux.pod_resources
    memory = int(res.memory.limit.value) if res.HasField("memory") and res.memory.HasField("limit") else 0
    return cpu_limit_milli(res.cpu), max(0, memory)


def pod_cpu_quota(pod: Any) -> tuple[int, int] | None:
    """The sandbox's CPU quota and period (µs), None without a quota. The kubelet computes them as for
    the pod cgroup (kuberuntime_sandbox_linux.go calculateSandboxResources → calculateLinuxResources:
    milliCPUToQuota of PodLimits with its cpuCFSQuotaPeriod; cm/helpers_linux.go ResourceConfigForPod:
    MilliCPUToQuota of the same limits and period), so this is the quota the kubelet leaves a pod it
    never pinned (none with `cpuCFSQuota: false`, which sends no quota here either)."""
    cpu = pod.linux.pod_resources.cpu
    quota = int(cpu.quota.value) if cpu.HasField("quota") else 0
    period = int(cpu.period.value) if cpu.HasField("period") else 0
    return (quota, period) if quota > 0 and period > 0 else None


def exceeds(pod: Any, together: Iterable[ContainerIntent]) -> str:
    """Why containers that run together cannot be an ordinary pod's ("" = they can): their limits
    add up to more than the sandbox's (kubelet PodLimits, k8s.io/component-helpers/resource/helpers.go
    :237-340 in v1.32.10: the app containers' and sidecars' sum, or an init container's plus the
    sidecars before it, whichever is larger). One millicore per container of slack: quotas round."""
    cpu, memory = pod_limits(pod)
    intents = list(together)
    if cpu and sum(i.limit_milli for i in intents) > cpu + len(intents):
        return "pod-cpu-limit-exceeded"
    if memory and sum(i.memory_limit for i in intents) > memory:
        return "pod-memory-limit-exceeded"
    return ""


def settle(tr: NodeState, intent: ContainerIntent, pod: Any, gated: bool = False) -> ContainerIntent:
    """At a kubelet pod's container create, before its admission: is its pod one with pod-level
    resources? If so (now or already known), the container gets none, and its siblings admitted
    before anything showed it go to the shared pool (under the gate: those whose own data proves
    them Guaranteed-equivalent keep theirs)."""
    if not intent.kubelet or intent.qos != GUARANTEED:
        return intent  # only a Guaranteed pod's containers get exclusive CPUs or memory at all
    key = (intent.pod_key, intent.container)
    siblings = [t for t in tr.containers.in_pod(intent.pod_key) if t.key != key]
    reason = intent.pod_level or next((t.intent.pod_level for t in siblings if t.intent.pod_level), "")
    if not reason:
        running = [t.intent for t in siblings if not t.stopped and not (t.intent.init and not t.intent.restartable)]
        reason = exceeds(pod, [*running, intent])
    if not reason:
        return intent
    demote(tr, siblings, reason, gated)
    return as_pod_level(intent, reason, gated)


def demote(tr: NodeState, siblings: Iterable[ContainerRecord], reason: str, gated: bool = False) -> None:
    """Siblings admitted before their pod was known to use pod-level resources: shared, their
    exclusive CPUs and memory released (the new cpusets reach them as any pool change does). One
    whose CFS quota we removed gets the kubelet's back in an NRI update (reply_updates.quota_back),
    which only a reply carries: it rides on the create's reply even if started (a pass writes
    cpusets only); its pod cgroup's quota is put back by a pass (core/quotas.py `QuotaBook.pod_level`)."""
    for t in siblings:
        if t.intent.pod_level:
            continue
        t.intent = as_pod_level(t.intent, reason, gated)
        if t.intent.request_milli:  # gated, its own request proven: admitted with it, it keeps its CPUs
            continue
        a = tr.assignment(t)
        if a is None:
            continue
        held = a.exclusive or tr.engine.memory_mems(tr.state, *t.key) is not None
        if not held:
            continue
        state = tr.engine.remove(tr.state, *t.key)
        if t.quota_removed:
            tr.via_reply.add(t.container_id)
        i = t.intent
        tr.state, _ = tr.engine.admit(state, AdmissionRequest(
            i.pod_key, i.container, QoS.GUARANTEED, 0, i.limit_milli, init=i.init, restartable=i.restartable))
        log.warning("pod uses pod-level resources: container moved to the shared pool (the kubelet's CPU and "
                    "Memory Managers give its pod nothing exclusive)", pod=f"{i.namespace}/{i.pod_name}",
                    container=i.container, released=str(a.current) if a.exclusive else "", reason=reason)


def of_listing(pods: Mapping[str, Any], intents: Mapping[str, tuple[str, ContainerIntent, bool]]) -> dict[str, str]:
    """Synchronize: sandbox id -> why that pod uses pod-level resources, from its containers all at
    once. ``intents``: container id -> (sandbox id, intent, stopped)."""
    by_pod: dict[str, list[tuple[ContainerIntent, bool]]] = {}
    for sandbox_id, intent, stopped in intents.values():
        by_pod.setdefault(sandbox_id, []).append((intent, stopped))
    out: dict[str, str] = {}
    for sandbox_id, members in by_pod.items():
        pod = pods.get(sandbox_id)
        if pod is None or not any(i.kubelet and i.qos == GUARANTEED for i, _ in members):
            continue
        reason = next((i.pod_level for i, _ in members if i.pod_level), "")
        running = [i for i, stopped in members if not stopped and not (i.init and not i.restartable)]
        reason = reason or exceeds(pod, running)
        if reason:
            out[sandbox_id] = reason
    return out
