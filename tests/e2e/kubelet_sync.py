"""The order of the kubelet v1.32's CRI calls for one pod: its start (init containers one after another,
sidecars left running, then the app containers), a container's restart, and its removal. Citations as in
kubelet_model.py (``vendor/k8s.io/kubernetes/pkg/`` of kubeedge/kubeedge).

Between two calls the kubelet may wait for what its next sync needs to see (``Call.wait``): a sync runs
when PLEG reports a change, PLEG relists every second (kubelet.go:187 genericPlegRelistPeriod), so the next
container of a pod is created up to a second after the previous one exited or started.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .kubelet_pod import Pod

PLEG_RELIST_SECONDS = 1.0  # kubelet.go:187
MINIMUM_GRACE_PERIOD = 2  # kuberuntime/kuberuntime_manager.go:73 minimumGracePeriodInSeconds


@dataclass(frozen=True)
class Call:
    """One CRI call: ``method`` is the RuntimeService method, ``container`` the pod's container it is about.
    ``wait`` is what the kubelet sees before its next call for this pod: "exited" (the container exited
    with status 0) or "running"; "" for none."""

    method: str
    container: str = ""
    restart_count: int = 0  # CreateContainer: metadata.attempt, the restartCount annotation, <n>.log
    timeout: int = 0  # StopContainer: the grace period in seconds
    wait: str = ""


def start_calls(pod: Pod) -> list[Call]:
    """A new pod: RunPodSandbox (kuberuntime_manager.go:1214), then one init container per sync in spec
    order (:944-955 the first; kuberuntime_container.go:1019-1249 computeInitContainerActions: a regular
    init container's successor starts once it exited 0, :1170-1190; a sidecar's once it runs, :1095-1130;
    a running regular one is waited for, :1163-1166), each created and started in one step
    (kuberuntime_container.go:196-329 startContainer: CreateContainer :266, StartContainer :281), then every
    app container in spec order in one sync (kuberuntime_manager.go:1012-1045, :1386-1389)."""
    calls = [Call("RunPodSandbox")]
    for c in pod.init_containers:
        calls += [Call("CreateContainer", c.name), Call("StartContainer", c.name, wait="running" if c.restartable
                                                                       else "exited")]
    for c in pod.containers:
        calls += [Call("CreateContainer", c.name), Call("StartContainer", c.name)]
    return calls


def restart_calls(pod: Pod, name: str, restart_count: int, exited_instances: int = 1) -> list[Call]:
    """A container started again in its sandbox: startContainer with restartCount = the last instance's + 1
    (kuberuntime_container.go:217-223). For an init container, pruneInitContainersBeforeStart first
    removes every exited instance of it but the newest (kuberuntime_manager.go:1162,
    kuberuntime_container.go:871-902): one RemoveContainer per older instance, oldest first."""
    if restart_count < 1:
        raise ValueError("a restart has restart_count >= 1")
    prune = [Call("RemoveContainer", name)] * (exited_instances - 1) if pod.is_init(name) else []
    wait = "exited" if pod.is_init(name) and not pod.container(name).restartable else ""
    return [*prune, Call("CreateContainer", name, restart_count=restart_count), Call("StartContainer", name, wait=wait)]


def stop_calls(pod: Pod, running: Sequence[str], instances: Sequence[str]) -> list[Call]:
    """Pod deletion. ``running``: names of its running containers; ``instances``: every container of the pod
    the runtime still has (names, oldest first, exited ones included).

    kuberuntime_manager.go:1525-1543 killPodWithSyncResult: StopContainer for each running container
    (kuberuntime_container.go:829-865, concurrent; with sidecars the termination ordering makes each sidecar
    wait for every app container and for the sidecars after it, kuberuntime_termination_order.go:43-90 and
    kuberuntime_container.go:797-802), timeout the pod's grace period (:1364-1383, at least 2 s :804-807),
    then StopPodSandbox (:1531-1540, "the sandbox will be removed in GarbageCollect"). The garbage collector
    (every minute, kubelet.go:206) removes every container of a deleted pod (kuberuntime_gc.go:235-240,
    through removeContainer, kuberuntime_container.go:1314-1328) and then the sandbox once no container is
    left in it (kuberuntime_gc.go:279-324, :413-420)."""
    grace = max(pod.termination_grace_period, MINIMUM_GRACE_PERIOD)
    apps = [c.name for c in pod.containers if c.name in running]
    sidecars = [c.name for c in reversed(pod.init_containers) if c.name in running]
    unknown = set(running) - set(apps) - set(sidecars)
    if unknown:
        raise ValueError(f"pod {pod.name} has no container {sorted(unknown)}")
    calls = [Call("StopContainer", name, timeout=grace) for name in apps + sidecars]
    calls.append(Call("StopPodSandbox"))
    calls += [Call("RemoveContainer", name) for name in instances]
    calls.append(Call("RemovePodSandbox"))
    return calls
