"""Kubelet-built pods on a real containerd, sampled: a Guaranteed pod with an init container (it runs, exits
0) and an app container, started as the kubelet v1.32 starts it (kubelet_sync.start_calls: the app container
is created a PLEG relist after the init container exited) with the kubelet's requests (kubelet_pod.py:
nothing marks the init container), beside a Burstable and a BestEffort pod.

A thread reads every shared container's cgroup `cpuset.cpus` and its process's `Cpus_allowed_list` from
the moment the init container's start returned until the pod's sandbox is stopped: no sample may include
the pod's exclusive CPUs, not while the init container runs, not between its exit and the app container's
create, not while the app runs. The app container gets the init container's CPUs, as the kubelet's static
policy gives them (policy_static.go updateCPUsToReuse: a regular init container's CPUs are reusable by its
pod's next containers).
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

from nri_pinner.engine.cpuset import CPUSet

from . import kubelet_model as km
from . import kubelet_pod as kp
from . import kubelet_sync as ks
from .harness import PrivateContainerd
from .node_env import all_cpus
from .pinner import start_pinner, wait_for
from .pods import DEFAULT_GUARANTEED_MEMORY, WORKLOAD, remove_pod, resources_for, start_pod
from .procfs import read_cpus_allowed_list

INIT_SECONDS = 0.5  # the init container's life
ALL = all_cpus()


def _allowed(status: Path) -> str:
    for line in status.read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return ""


def test_init_container_cpus_stay_the_pods_and_the_app_reuses_them(containerd: PrivateContainerd) -> None:
    pinner = start_pinner(containerd)
    shared_pods = [containerd.run_pod("burstable", 250, 500), containerd.run_pod("besteffort")]
    ids = [cid for pod in shared_pods for cid in pod.container_ids]
    assert wait_for(lambda: all(pinner.shared_cpus(cid) == ALL for cid in ids), timeout=20)
    # the CPUs each may run on: below a QoS slice the plugin holds at the pool, the effective set (its own is
    # the whole node there, VM tier with the setting: run 20261129-165455 failed on the own set)
    files = [(pinner.shared_cpus_file(cid), Path(f"/proc/{containerd.container_pid(cid)}/status")) for cid in ids]

    res = resources_for("guaranteed", 1000, 1000, None, None)
    uid = str(uuid.uuid4())
    spec = kp.Pod(f"kubelet-init-{uid[:8]}", "default", uid,
                  containers=(kp.Container("app", res, command=WORKLOAD),),
                  init_containers=(kp.Container("init", res, command=("sh", "-c", f"sleep {INIT_SECONDS}")),))
    samples: list[tuple[float, str, str]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for cgroup, status in files:
                samples.append((time.monotonic(), cgroup.read_text(), _allowed(status)))

    marks: dict[str, float] = {}
    exclusive: dict[str, CPUSet] = {}

    def after(call: ks.Call, cid: str) -> None:
        marks[f"{call.method} {call.container}"] = time.monotonic()
        if call.method == "StartContainer":
            exclusive[call.container] = CPUSet.parse(pinner.assignment(cid)["cpus"])

    def before(call: ks.Call) -> None:
        marks.setdefault(call.method, time.monotonic())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        pod = start_pod(containerd.cri, containerd.pods_dir, containerd.record_pod_cgroup, spec, after=after)
        app = pod.containers["app"]
        time.sleep(0.3)
        assert CPUSet.parse(read_cpus_allowed_list(containerd.container_pid(app))) == exclusive["app"]
        assert pinner.assignment(app)["exclusive"] is True
        remove_pod(containerd.cri, pod, stop_timeout_s=2, before=before)
        assert wait_for(lambda: all(pinner.shared_cpus(cid) == ALL for cid in ids), timeout=20)
    finally:
        stop.set()
        sampler.join(5)

    pod_cpus = exclusive["init"]
    assert pod_cpus and exclusive["app"] == pod_cpus  # the app container reuses the init container's CPUs
    opened, closed = marks["StartContainer init"], marks["StopPodSandbox"]
    inside = [s for s in samples if opened <= s[0] < closed]
    # from the init container's exit (INIT_SECONDS after its start) to the app's start
    gap = [s for s in inside if opened + INIT_SECONDS + 0.1 <= s[0] < marks["StartContainer app"]]
    leaks = [s for s in inside if CPUSet.parse(s[1].strip()) & pod_cpus or CPUSet.parse(s[2]) & pod_cpus]
    print(f"\ne2e: containerd {containerd.version}: kubelet-built pod, init and app on {pod_cpus}; "
          f"{len(inside)} samples of {len(files)} shared containers from the init container's start to the "
          f"sandbox's stop ({closed - opened:.2f}s, {len(gap)} between the init's exit and the app's start), "
          f"{len(leaks)} on the pod's CPUs")
    assert len(gap) >= len(files)  # the sampler ran while the exited init container held the CPUs
    assert leaks == [], leaks[:5]
    assert read_cpus_allowed_list(containerd.container_pid(ids[0])) == ALL  # and the pool grew back
    for shared in shared_pods:
        containerd.remove_pod(shared)


def test_no_container_of_a_pod_with_pod_level_resources_is_pinned(containerd: PrivateContainerd) -> None:
    """A Guaranteed pod whose spec.resources (1 CPU) sets its size, as the kubelet v1.34-v1.36 starts it
    (kubelet_pod.py: containers without a limit of their own are given the pod's): the first container
    looks like a one-container pod and is pinned at its create; the second one shows the pod, and from
    then on no container of it holds exclusive CPUs, the first one included (kubelet: none ever)."""
    pinner = start_pinner(containerd)
    uid = str(uuid.uuid4())
    memory = DEFAULT_GUARANTEED_MEMORY
    level = km.PodLevel(cpu_milli_request=1000, cpu_milli_limit=1000, memory_request=memory, memory_limit=memory)
    own = km.ContainerResources(1000, 1000, memory, memory)
    spec = kp.Pod(f"pod-level-{uid[:8]}", "default", uid, resources=level, containers=(
        kp.Container("a", command=WORKLOAD), kp.Container("b", command=WORKLOAD),
        kp.Container("own", own, command=WORKLOAD)))
    pod = start_pod(containerd.cri, containerd.pods_dir, containerd.record_pod_cgroup, spec)
    ids = list(pod.containers.values())
    assert wait_for(lambda: all(containerd.cgroup_cpuset(cid) == ALL for cid in ids), timeout=20)
    assert not any(pinner.assignment(cid)["exclusive"] for cid in ids)
    assert all(read_cpus_allowed_list(containerd.container_pid(cid)) == ALL for cid in ids)
    remove_pod(containerd.cri, pod, stop_timeout_s=2)
