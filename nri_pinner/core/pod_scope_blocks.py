"""Topology-manager pod scope with the kubelet 1.36 alpha gate `PodLevelResourceManagers` (setting
`topology_manager.pod_level_resource_managers` with `scope = "pod"`): a Guaranteed pod known to use
pod-level resources (pod_level.py's signals) gets one block of its `spec.resources` CPUs at its first
container's create, each container its precomputed part of it (engine/pod_level_admission.py).

The kubelet admits such a pod once, with the whole spec (topologymanager/scope_pod.go
`admitUsingPodResources`, cpumanager/policy_static.go `AllocatePod`); NRI shows one container at a
time. The whole spec is here only when the pod carries `noderesource.dev/resources` (the resource
annotator's copy of every container's requests and limits) and `spec.resources`' CPUs reach the
sandbox (NRI `linux.pod_resources`: the kubelet's calculateSandboxResources). So the block is made
only when, at the pod's first container create (no sibling tracked yet):
* the annotation reads whole, every entry with it, and lists the container being created;
* which init containers are sidecars is said (`nri-pinner.io/sidecar-containers`, "" for none) when
  it lists init containers: a sidecar's slice is out of every later container's CPUs. The annotation
  is a JSON map (spec order lost): sidecars are taken first, then the regular init containers, so a
  regular init container never shares a sidecar's slice (the kubelet's order gives it at least as
  much; the empty-pool check is then at most stricter than the kubelet's, never looser);
* the sandbox's CPU request (its shares; its quota, when set, agreeing) is known.
Otherwise (or when a sibling came first: a pod shown only later, a restart that lost the block) the
pod gets no block: its containers run on the node's shared pool, as with the gate off — never more
than the kubelet gives. Memory: the Memory Manager's pod-level path is not built; such a pod's
containers get no memory blocks (their cpuset.mems follow their CPUs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from ..engine.cpumanager.pod_level import PodLevelContainer, PodLevelSpec
from ..engine.cpuset import EMPTY
from ..engine.decision import Decision
from ..engine.errors import AdmissionError
from ..engine.pod_level_admission import admit_pod, place
from .intent import (
    GUARANTEED,
    NODE_RESOURCES_ANNOTATION,
    SIDECAR_ANNOTATION,
    AnnotatedCPU,
    ContainerIntent,
    NodeResourcesError,
    cpu_limit_milli,
    parse_node_resources,
    shares_to_milli,
)
from .state import NodeState

if TYPE_CHECKING:
    from ..config import Settings
    from ..engine.cpumanager.state import EngineState

log = structlog.get_logger("nri_pinner.service")


def gate_on_in_pod_scope(settings: Settings) -> bool:
    """The kubelet's PodLevelResourceManagers gate on, in topology-manager pod scope."""
    tm = settings.topology_manager
    return tm.pod_level_resource_managers and tm.scope == "pod"


def pod_cpu_request(pod: Any) -> int:
    """The sandbox's CPU request (millicores; spec.resources for a pod-level pod), 0 = unknown: its
    shares, and its quota when set must agree (within the rounding of either)."""
    cpu = pod.linux.pod_resources.cpu
    shares = int(cpu.shares.value) if cpu.HasField("shares") else 0
    request = shares_to_milli(shares) if shares > 2 else 0
    limit = cpu_limit_milli(cpu)
    if limit and request and abs(limit - request) > 1:
        return 0
    return limit or request


def pod_spec(pod: Any, pod_key: str, container: str) -> PodLevelSpec | str:
    """The whole pod spec as the kubelet's pod-level path reads it; a str says why it is not known."""
    text = pod.annotations.get(NODE_RESOURCES_ANNOTATION)
    if text is None:
        return f"no {NODE_RESOURCES_ANNOTATION} annotation"
    try:
        res = parse_node_resources(text)
    except NodeResourcesError as exc:
        return str(exc)
    entries: dict[str, AnnotatedCPU] = {}
    for name, entry in (*res.init.items(), *res.app.items()):
        if isinstance(entry, NodeResourcesError):
            return str(entry)
        entries[name] = entry
    if container not in entries:
        return f"{NODE_RESOURCES_ANNOTATION} does not list container {container!r}"
    if res.init and SIDECAR_ANNOTATION not in pod.annotations:
        return f"it lists init containers but not which are sidecars ({SIDECAR_ANNOTATION}, \"\" for none)"
    sidecars = {n.strip() for n in pod.annotations[SIDECAR_ANNOTATION].split(",")} if res.init else set()
    request = pod_cpu_request(pod)
    if not request:
        return "the sandbox's CPU request is not known (no shares, or a quota that disagrees)"

    def one(name: str, init: bool) -> PodLevelContainer:
        e = entries[name]
        return PodLevelContainer(name, e.request_milli, e.limit_milli, e.memory_request_bytes, e.memory_limit_bytes,
                                 init=init, restartable=init and name in sidecars)

    inits = sorted(res.init, key=lambda n: (n not in sidecars, n))  # sidecars first (module doc)
    return PodLevelSpec(pod_key, request, True, (*(one(n, True) for n in inits), *(one(n, False) for n in res.app)))


def shows_pod_level(spec: PodLevelSpec, pod: Any) -> bool:
    """Does the whole spec show spec.resources in a Guaranteed pod? Without it every container is
    Guaranteed itself (qos.go ComputePodQOS: CPU and memory requests = limits, set) and the sandbox's
    CPU limit is the containers' sum (PodLimits; only computed here without init containers)."""
    if any(not (0 < c.cpu_request_milli == c.cpu_limit_milli and 0 < c.memory_request == c.memory_limit)
           for c in spec.containers):
        return True
    limit = cpu_limit_milli(pod.linux.pod_resources.cpu)
    apps = [c for c in spec.containers if not c.init]
    return (bool(limit) and len(apps) == len(spec.containers)
            and abs(sum(c.cpu_limit_milli for c in apps) - limit) > len(apps))


def admission(node: NodeState, settings: Settings, intent: ContainerIntent,
              pod: Any) -> tuple[EngineState, Decision] | None:
    """The container's place in its pod's block, admitting the pod at its first create; a refused
    decision when the pod cannot be admitted; None when the pod has no block (the shared pool). The
    pod is known to use pod-level resources from the container (pod_level.py) or the whole spec."""
    if not (gate_on_in_pod_scope(settings) and intent.kubelet and intent.qos == GUARANTEED):
        return None
    key, engine = intent.pod_key, node.engine
    state = node.state
    if key not in state.pod_blocks:
        if any(t.intent.container != intent.container for t in node.containers.in_pod(key)):
            return None  # a sibling came first without a block: the whole pod stays as the gate off
        spec = pod_spec(pod, key, intent.container)
        if not intent.pod_level and (isinstance(spec, str) or not shows_pod_level(spec, pod)):
            return None  # not known to use pod-level resources: an ordinary pod-scope admission
        if isinstance(spec, str):
            log.info("pod-level pod in pod scope without a block: its containers use the shared pool",
                     pod=f"{intent.namespace}/{intent.pod_name}", reason=spec)
            return None
        try:
            state, _ = admit_pod(engine, state, spec)
        except AdmissionError as exc:
            return state, Decision(key, intent.container, False, False, EMPTY, (), engine.policy.shared_pool(state),
                                   None, exc.reason, str(exc))
        if key not in state.pod_blocks:
            return None  # no whole CPUs in spec.resources: nothing to do (podGuaranteedCPUs 0)
        log.info("pod-level pod admitted: its block", pod=f"{intent.namespace}/{intent.pod_name}",
                 block=str(state.pod_blocks[key].block), pod_pool=str(state.pod_blocks[key].pod_pool))
    return place(engine, state, key, intent.container, init=intent.init, restartable=intent.restartable)


def slices(in_block: tuple[EngineState, Decision] | None) -> bool:
    """Does the pod of an admission in a block hold exclusive slices (its cgroup keeps no quota)?"""
    if in_block is None or not in_block[1].admitted:
        return False
    block = in_block[0].pod_blocks.get(in_block[1].pod)
    return block is not None and bool(block.exclusive)
