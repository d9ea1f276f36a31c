"""No CFS quota on a pinned container and its pod (README "Configuration reference":
`cpu_manager.disable_cpu_quota_with_exclusive_cpus`), on real containerd 1.7 and 2.1, runc and cgroups.

The pod is built as the kubelet v1.33+ builds it under `cpuManagerPolicy: none` (its own quota gate sees
no exclusive CPUs there): the pod cgroup created first with the sum of the limits as its quota
(pod_container_manager_linux.go EnsureExists → helpers_linux.go ResourceConfigForPod), then the sandbox
and two containers with their limit x period: "app" (1 CPU, pinned by nri-pinner, kept busy by more
runnable threads than it has CPUs) and "side" (500m, on the shared pool). Then the kubelet's in-place
resize of "side" (doPodResizeAction): the pod cgroup's quota first, the container's update after.

Under the systemd driver (the VM tier's guest, cgroup v2) the pod cgroup is the kubelet's transient
slice, made and resized through systemd as its cgroup manager does (kubelet_slice.py), and systemd's own
view of the slice must hold no quota either: a later re-application of the slice writes what it holds.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from nri_pinner.engine.cpuset import CPUSet

from . import host_cleanup as hc
from . import kubelet_model as km
from . import kubelet_pod as kp
from . import kubelet_slice as ks
from . import node_env, resource_annotator
from .harness import PrivateContainerd
from .pinner import start_pinner, wait_for
from .pods import DEFAULT_GUARANTEED_MEMORY, WORKLOAD, remove_pod, resources_for, start_pod

PERIOD = 100_000
BUSY_SECONDS = 3.0
# three runnable threads on the one exclusive CPU; pid 1 answers TERM (the rest die with its namespace)
BUSY = ("sh", "-c", "trap 'exit 0' TERM; for i in 1 2 3; do (while :; do :; done) & done; sleep 2147483647 & wait")


def _cpu_dir(relative: str) -> Path:
    """A cgroup in the cpu controller's hierarchy: v1 <root>/cpu/<path>, v2 <root>/<path>."""
    v1 = hc.CGROUP_ROOT / "cpu"
    return (v1 if v1.is_dir() else hc.CGROUP_ROOT) / relative.strip("/")


def _quota(d: Path) -> int:
    """cpu.cfs_quota_us (v1), or the first field of cpu.max (v2: "max" = -1)."""
    if (d / "cpu.cfs_quota_us").exists():
        return int((d / "cpu.cfs_quota_us").read_text())
    field = (d / "cpu.max").read_text().split()[0]
    return -1 if field == "max" else int(field)


def _set_quota(d: Path, quota: int) -> None:
    """What the kubelet's cgroup manager writes for a pod with a CPU limit (runc fs / fs2)."""
    if (d / "cpu.cfs_quota_us").exists():
        (d / "cpu.cfs_period_us").write_text(str(PERIOD))
        (d / "cpu.cfs_quota_us").write_text(str(quota))
    else:
        (d / "cpu.max").write_text(f"{quota} {PERIOD}")


def _usage_seconds(runtime: PrivateContainerd, cid: str) -> float:
    """CPU time the container used: v1 cpuacct.usage (ns; its own hierarchy or beside cpu), v2 usage_usec."""
    v1 = runtime.cgroup_dir(cid, "cpuacct") / "cpuacct.usage"
    if v1.exists():
        return int(v1.read_text()) / 1e9
    for line in (runtime.cgroup_dir(cid, "cpu") / "cpu.stat").read_text().splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    raise AssertionError(f"no CPU usage for {cid[:12]}")


def _throttled(d: Path) -> int:
    for line in (d / "cpu.stat").read_text().splitlines():
        if line.startswith("nr_throttled "):
            return int(line.split()[1])
    raise AssertionError(f"no nr_throttled in {d}/cpu.stat")


def _kubelet_pod_cgroup(containerd: PrivateContainerd, parent: str, cpu_milli: int, memory: int) -> None:
    """The kubelet's pod cgroup before RunPodSandbox (EnsureExists → ResourceConfigForPod: shares of the
    requests, quota and memory of the limits; of spec.resources when the pod sets them)."""
    containerd.record_pod_cgroup(parent)  # the harness's cleanup removes it (stops the slice)
    quota = cpu_milli * PERIOD // 1000
    if node_env.SYSTEMD:
        ks.create(parent, ks.PodResources(km.milli_cpu_to_shares(cpu_milli), quota, PERIOD, memory))
        return
    d = _cpu_dir(parent)
    if (hc.CGROUP_ROOT / "cgroup.controllers").exists():  # v2: runc's fs2 Apply enables the controllers
        ks.create_cgroup_path(d)
    d.mkdir(parents=True, exist_ok=True)
    _set_quota(d, quota)


def systemd_quota(parent: str) -> str:
    """What systemd re-applies to the kubelet's pod slice ("" without systemd)."""
    return ks.shown(ks.unit_and_parent(parent)[0], "CPUQuotaPerSecUSec") if node_env.SYSTEMD else ""


def _skip_without_pod_slices() -> None:
    if node_env.SYSTEMD and not (hc.CGROUP_ROOT / "cgroup.controllers").exists():
        pytest.skip("the kubelet's pod slice is built here on cgroup v2 only (runc's fs2 writes)")


def test_a_busy_pinned_container_and_its_pod_run_without_a_quota(containerd: PrivateContainerd) -> None:
    _skip_without_pod_slices()
    pinner = start_pinner(containerd)
    uid = str(uuid.uuid4())
    spec = kp.Pod(f"quota-{uid[:8]}", "default", uid, containers=(
        kp.Container("app", resources_for("guaranteed", 1000, 1000, None, None), command=BUSY),
        kp.Container("side", resources_for("guaranteed", 500, 500, None, None), command=WORKLOAD)))

    def ensure_exists(parent: str) -> None:  # the pod's limits: the sum of its containers'
        _kubelet_pod_cgroup(containerd, parent, 1500, 2 * DEFAULT_GUARANTEED_MEMORY)

    def resize_pod(parent: str, quota: int) -> None:  # the kubelet's pod cgroup write of a resize
        if node_env.SYSTEMD:
            ks.resize_cpu(parent, quota, PERIOD)
        else:
            _set_quota(_cpu_dir(parent), quota)

    pod = start_pod(containerd.cri, containerd.pods_dir, ensure_exists, spec)
    try:
        app, side = pod.containers["app"], pod.containers["side"]
        pod_dir = _cpu_dir(pod.cgroup_parent)
        app_dir, side_dir = containerd.cgroup_dir(app, "cpu"), containerd.cgroup_dir(side, "cpu")
        assert pinner.assignment(app)["exclusive"] is True and pinner.assignment(side)["exclusive"] is False
        assert containerd.cpus_allowed_list(app) == pinner.assignment(app)["cpus"]
        before = {"app": _throttled(app_dir), "pod": _throttled(pod_dir)}
        used = _usage_seconds(containerd, app)
        time.sleep(BUSY_SECONDS)
        quotas = {"app": _quota(app_dir), "pod": _quota(pod_dir), "side": _quota(side_dir)}
        throttled = {"app": _throttled(app_dir) - before["app"], "pod": _throttled(pod_dir) - before["pod"]}
        used = _usage_seconds(containerd, app) - used
        print(f"\ne2e: containerd {containerd.version}: busy pinned container (3 threads on CPU "
              f"{pinner.assignment(app)['cpus']}, {used:.2f}s of CPU in {BUSY_SECONDS:.0f}s): cfs quota {quotas}, "
              f"nr_throttled {throttled}")
        # it ran busy (host processes outside the pods share its CPU: on a loaded host it gets less of it)
        assert used > BUSY_SECONDS / 10
        assert quotas == {"app": -1, "pod": -1, "side": 500 * PERIOD // 1000}
        assert throttled == {"app": 0, "pod": 0}
        if node_env.SYSTEMD:  # the plugin told systemd (SetUnitProperties CPUQuotaPerSecUSec=infinity)
            assert systemd_quota(pod.cgroup_parent) == "infinity"

        # the kubelet resizes "side" to 700m: the pod cgroup's new quota first (from -1, every quota is
        # larger: written before the containers), then the container's update; the pod's goes again
        # (under systemd the kubelet's call, confirmed, sets the slice's CPUQuotaPerSecUSec to 1.7 s: not
        # asserted here, a reconcile pass of the plugin may tell systemd "infinity" again at any moment)
        resize_pod(pod.cgroup_parent, 1700 * PERIOD // 1000)
        containerd.cri.update_container_resources(side, **kp.resize_resources(
            pod.spec, "side", resources_for("guaranteed", 700, 700, None, None), pod.node))
        assert wait_for(lambda: _quota(pod_dir) == -1, timeout=3.0), _quota(pod_dir)
        assert _quota(side_dir) == 700 * PERIOD // 1000 and _quota(app_dir) == -1
        if node_env.SYSTEMD:  # told again: the kubelet's call had put 1.7 s into systemd's view
            assert wait_for(lambda: systemd_quota(pod.cgroup_parent) == "infinity", timeout=3.0), \
                systemd_quota(pod.cgroup_parent)
    finally:
        remove_pod(containerd.cri, pod, stop_timeout_s=2)
        if node_env.SYSTEMD:  # StopUnit of the kubelet's slice (its Destroy once the pod is gone)
            hc.stop_pod_slice(ks.unit_and_parent(pod.cgroup_parent)[0])


def test_under_the_gate_a_pod_level_pod_pins_its_guaranteed_equivalent_container(
        containerd: PrivateContainerd) -> None:
    """The kubelet 1.36 alpha gate PodLevelResourceManagers in container scope (README "Pod-level
    resource managers"): a Guaranteed pod with spec.resources 1500m; "a" has nothing of its own (the
    kubelet gives it the pod's limit as its quota: kuberuntime_container_linux.go getCPULimit) and is
    created first, its create shows the pod; "own" has 1 CPU and memory of its own, its spec in
    noderesource.dev/resources (resource_annotator.py). "own" is pinned and runs with no quota, and so
    does the pod cgroup (the kubelet's PodHasExclusiveCPUs); "a" stays shared with its quota. Gate off,
    nothing is pinned (test_kubelet_pods_e2e.py)."""
    _skip_without_pod_slices()
    pinner = start_pinner(containerd, topology_manager={"pod_level_resource_managers": True})
    uid = str(uuid.uuid4())
    memory = DEFAULT_GUARANTEED_MEMORY
    level = km.PodLevel(cpu_milli_request=1500, cpu_milli_limit=1500, memory_request=2 * memory,
                        memory_limit=2 * memory)
    a = kp.Container("a", command=WORKLOAD)
    own = kp.Container("own", km.ContainerResources(1000, 1000, memory, memory), command=WORKLOAD)
    spec = kp.Pod(f"plrm-{uid[:8]}", "default", uid, containers=(a, own), resources=level,
                  annotations=resource_annotator.pod_annotations(a, own))
    pod_quota = 1500 * PERIOD // 1000
    pod = start_pod(containerd.cri, containerd.pods_dir,
                    lambda parent: _kubelet_pod_cgroup(containerd, parent, 1500, 2 * memory), spec)
    try:
        own_id, a_id = pod.containers["own"], pod.containers["a"]
        assert pinner.assignment(own_id)["exclusive"] is True and pinner.assignment(a_id)["exclusive"] is False
        assert containerd.cpus_allowed_list(own_id) == pinner.assignment(own_id)["cpus"]
        pod_dir = _cpu_dir(pod.cgroup_parent)
        assert wait_for(lambda: _quota(pod_dir) == -1, timeout=3.0), _quota(pod_dir)
        quotas = {"own": _quota(containerd.cgroup_dir(own_id, "cpu")), "a": _quota(containerd.cgroup_dir(a_id, "cpu"))}
        print(f"\ne2e: containerd {containerd.version}: gated pod-level pod: own on "
              f"{pinner.assignment(own_id)['cpus']}, a on {pinner.assignment(a_id)['cpus']}; cfs quota {quotas}")
        assert quotas == {"own": -1, "a": pod_quota}
        if node_env.SYSTEMD:
            assert wait_for(lambda: systemd_quota(pod.cgroup_parent) == "infinity", timeout=3.0), \
                systemd_quota(pod.cgroup_parent)
    finally:
        remove_pod(containerd.cri, pod, stop_timeout_s=2)
        if node_env.SYSTEMD:
            hc.stop_pod_slice(ks.unit_and_parent(pod.cgroup_parent)[0])



def test_in_pod_scope_a_pod_level_pods_containers_share_its_block(containerd: PrivateContainerd) -> None:
    """The gate in topology-manager pod scope (README "Pod-level resource managers"): a Guaranteed pod with
    spec.resources 1 CPU whose whole spec noderesource.dev/resources carries gets a block of one CPU at its
    first create; "a" and "b" have nothing of their own, so both run on the pod pool (the block: no slices)
    with the kubelet's quota (KEP-5526: the pod pool keeps it); the node's shared pool loses the block until
    the pod goes. Two CPUs here, one reserved: no room for a slice beside a pod pool."""
    _skip_without_pod_slices()
    pinner = start_pinner(containerd, topology_manager={"scope": "pod", "pod_level_resource_managers": True})
    uid = str(uuid.uuid4())
    memory = DEFAULT_GUARANTEED_MEMORY
    level = km.PodLevel(cpu_milli_request=1000, cpu_milli_limit=1000, memory_request=2 * memory,
                        memory_limit=2 * memory)
    a, b = kp.Container("a", command=WORKLOAD), kp.Container("b", command=WORKLOAD)
    spec = kp.Pod(f"plrm-{uid[:8]}", "default", uid, containers=(a, b), resources=level,
                  annotations=resource_annotator.pod_annotations(a, b))
    pod = start_pod(containerd.cri, containerd.pods_dir,
                    lambda parent: _kubelet_pod_cgroup(containerd, parent, 1000, 2 * memory), spec)
    try:
        rows = {n: pinner.assignment(pod.containers[n]) for n in ("a", "b")}
        block = pinner.status()["pod_blocks"][uid]["block"]
        print(f"\ne2e: containerd {containerd.version}: pod-scope pod-level pod: block {block}, "
              f"a on {rows['a']['cpus']}, b on {rows['b']['cpus']}")
        assert not rows["a"]["exclusive"] and not rows["b"]["exclusive"]
        assert rows["a"]["cpus"] == rows["b"]["cpus"] == block
        for n in ("a", "b"):
            assert wait_for(lambda n=n: containerd.cpus_allowed_list(pod.containers[n]) == block, timeout=3.0)
            assert _quota(containerd.cgroup_dir(pod.containers[n], "cpu")) == PERIOD
        assert not CPUSet.parse(block) & CPUSet.parse(pinner.status()["pools"]["shared"])
    finally:
        remove_pod(containerd.cri, pod, stop_timeout_s=2)
        if node_env.SYSTEMD:
            hc.stop_pod_slice(ks.unit_and_parent(pod.cgroup_parent)[0])
    assert wait_for(lambda: uid not in pinner.status().get("pod_blocks", {}), timeout=3.0)
