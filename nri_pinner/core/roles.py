"""Exited containers of kubelet pods keep their CPUs for their pod, as the kubelet's CPU manager does
(v1.32, vendored in kubeedge/kubeedge vendor/k8s.io/kubernetes/pkg/kubelet/):
- nothing releases CPUs when a container exits: cm/internal_container_lifecycle.go PostStopContainer
  calls only the topology manager; cpumanager/cpu_manager.go reconcileState skips terminated
  containers ("we can't call m.RemoveContainer() here because it could remove the allocated cpuset
  for the container which may be in the process of being restarted");
- a restarted container gets the same CPUs: policy_static.go Allocate, "container already present
  in state, skipping" (state is keyed by pod UID and container name, not by runtime container);
- a regular init container's CPUs are reusable by its pod's later containers, a restartable init
  (sidecar) or app container's are not: policy_static.go updateCPUsToReuse, allocateCPUs
  (GetAvailableCPUs().Union(reusableCPUs)); the init container's record stays, overlapping, and
  RemoveContainer releases only CPUs no sibling holds (getAssignedCPUsOfSiblings);
- CPUs go back only when the pod is no longer active: cpu_manager.go removeStaleState keeps every
  init and app container of every pod in activePods (kubelet_pods.go GetActivePods /
  filterOutInactivePods: not terminal, or still terminating), run before each Allocate and reconcile.
From NRI's view the pod goes at StopPodSandbox (kuberuntime_manager.go killPodWithSyncResult stops the
sandbox after killing its containers) or RemovePodSandbox; a container's last RemoveContainer also
releases its CPUs (the kubelet's GC removes the last instance of a container only with its pod's
content, kuberuntime_gc.go).
Which stopped container was a regular init container is decided when it matters (its pod's next
create): the annotations (intent.py), else the PodResources List (cached; refreshed at the stop),
else inferred: a container of the pod that exited with status 0 before a new container of its pod
was created (the kubelet starts the next container only after an init container succeeded:
kuberuntime_container.go computeInitContainerActions). An inferred init container that is created
again had been an app container after all: it is admitted afresh if a sibling reused its CPUs.
"""

from __future__ import annotations

from dataclasses import replace

import structlog

from ..engine.cpuset import EMPTY, CPUSet
from .effects import ListPodResources
from .intent import ContainerIntent
from .state import ContainerRecord, NodeState

log = structlog.get_logger("nri_pinner.service")


def role_at_create(tr: NodeState, intent: ContainerIntent) -> ContainerIntent:
    """Before admitting a kubelet pod's container: settle its stopped siblings' roles (their CPUs
    may be reused now), then its own role from what is known (a restart keeps the old record's)."""
    if not intent.kubelet:
        return intent
    key = (intent.pod_key, intent.container)
    old = tr.by_key(key)
    for t in tr.containers.in_pod(intent.pod_key):
        if t.stopped and not t.intent.role and t.key != key and tr.assignment(t) is not None:
            decide_role(tr, t, final=True)
    if not intent.role and old is not None and old.intent.role:
        intent = replace(intent, init=old.intent.init, restartable=old.intent.restartable, role=old.intent.role)
    a = tr.state.get(*key)
    if old is not None and old.intent.role == "inferred" and a is not None and a.exclusive and a.init:
        # it comes back: it was an app container (or a sidecar), not an init container; if a
        # sibling reused its CPUs meanwhile it must not share them: admitted afresh
        siblings = EMPTY
        for b in tr.state.pod_assignments(intent.pod_key):
            if b.exclusive and b.key != key and not (b.init and not b.restartable):
                siblings = siblings | b.current
        if a.current & siblings:
            tr.state = tr.engine.remove(tr.state, *key)
            log.warning("container inferred to be an init container was created again: its CPUs were "
                        "reused by its pod, it gets new ones", pod=f"{intent.namespace}/{intent.pod_name}",
                        container=intent.container, reused=str(a.current & siblings))
        intent = replace(intent, init=False, restartable=False, role="")
    if not intent.role:
        listed = listed_in_podresources(tr, intent.namespace, intent.pod_name, intent.container)
        if listed is not None:
            intent = replace(intent, init=not listed, role="podresources")
    return intent

def listed_in_podresources(tr: NodeState, namespace: str, pod: str, container: str) -> bool | None:
    """Is the container in the last PodResources List? None when the List does not have its pod (it
    may lag a create)."""
    listed = tr.listed_pods
    containers = None if listed is None else listed.get((namespace, pod))
    if containers is None:
        return None
    return container in containers

def decide_role(tr: NodeState, t: ContainerRecord, final: bool) -> ListPodResources | None:
    """Was the stopped container a regular init container? PodResources (cached) says when it
    lists the pod; else, when ``final`` (its pod's next create), inferred from its exit status.
    Not ``final`` and the List lacks the pod: undecided, and a new List is to be asked for (returned,
    for the core to emit), read at the pod's next create."""
    i = t.intent
    listed = listed_in_podresources(tr, i.namespace, i.pod_name, i.container)
    if listed is not None:
        init, role = not listed, "podresources"
    elif final:
        init, role = t.exit_code == 0, "inferred"
    else:
        return ListPodResources()
    t.intent = replace(i, init=init, restartable=False, role=role)
    if init:
        tr.state = tr.engine.mark_init(tr.state, *t.key)
    log.info("stopped container's role decided", pod=f"{i.namespace}/{i.pod_name}", container=i.container,
             role="init" if init else "app", decided_by=role, exit_code=t.exit_code)
    return None


def mark_sidecars(tr: NodeState, pod_key: str, creating_init: bool) -> None:
    """An init container still running when an app container is created is a sidecar: its CPUs
    must not be reused (kubelet: restartable init containers keep theirs)."""
    if creating_init:
        return
    for t in tr.containers.by_pod.get(pod_key, {}).values():  # no copy: only intents and state change
        if t.intent.init and not t.intent.restartable and not t.stopped:
            t.intent = replace(t.intent, restartable=True)
            a = tr.assignment(t)
            if a is not None:
                reusable = dict(tr.state.reusable)
                left = reusable.get(pod_key, a.current) - a.current
                if left:
                    reusable[pod_key] = left
                else:
                    reusable.pop(pod_key, None)
                tr.state = tr.state.with_changes(put=replace(a, restartable=True), reusable=reusable)


def release_pod(tr: NodeState, pod_key: str, sandbox_id: str, stopped_sandboxes: set[str]) -> CPUSet:
    """Drop the pod's records but those a container of another live sandbox of the pod holds (a
    recreated sandbox's containers, admitted before the old sandbox's removal arrives)."""
    live = {t.key for t in tr.containers.in_pod(pod_key)
            if t.sandbox_id != sandbox_id and t.sandbox_id not in stopped_sandboxes}
    before = tr.state.exclusive_cpus()
    for a in tr.state.pod_assignments(pod_key):
        if a.key not in live:
            tr.state = tr.engine.remove(tr.state, a.pod, a.container)
    return before - tr.state.exclusive_cpus()
