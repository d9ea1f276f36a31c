"""Smoke test of the e2e harness on each installed runtime: a Burstable pod through CRI, end to end."""

from __future__ import annotations

import stat

import pytest

from nri_pinner.engine.cpuset import CPUSet

from .harness import PrivateContainerd
from .host_cleanup import CGROUP_ROOT
from .plugins import PluginError

pytestmark = pytest.mark.e2e


def test_burstable_pod_runs_and_is_inspectable(containerd: PrivateContainerd) -> None:
    version = containerd.cri.version()
    print(f"containerd {containerd.runtime_key}: CRI reports {version.runtime_name} {version.runtime_version}")
    assert version.runtime_name == "containerd"
    assert version.runtime_version.startswith(containerd.runtime_key.split(".")[0] + ".")
    assert stat.S_ISSOCK(containerd.nri_socket.stat().st_mode), "NRI socket missing: NRI not enabled?"

    pod = containerd.run_pod("burstable", 250, 500, memory_limit=64 * 1024 * 1024)
    (cid,) = pod.container_ids
    listed = {c.id: c for c in containerd.cri.list_containers(pod.sandbox_id)}
    assert listed[cid].state == "RUNNING"
    assert listed[cid].labels["io.kubernetes.pod.uid"] == pod.uid

    cgroups_path = containerd.container_cgroups_path(cid)
    assert cgroups_path == f"/kubepods/burstable/pod{pod.uid}/{cid}"
    allowed = CPUSet.parse(containerd.cpus_allowed_list(cid))
    assert len(allowed) > 0
    assert CPUSet.parse(containerd.cgroup_cpuset(cid)) == allowed
    # The kubelet's numbers reached the cgroup: 250m → 256 shares, 500m limit → 50000/100000.
    cpu_dir = CGROUP_ROOT / "cpu" / cgroups_path.lstrip("/")
    if cpu_dir.is_dir():  # cgroup v1
        assert (cpu_dir / "cpu.shares").read_text().strip() == "256"
        assert (cpu_dir / "cpu.cfs_quota_us").read_text().strip() == "50000"

    containerd.remove_pod(pod)
    assert containerd.cri.list_containers() == []
    assert all(s.id != pod.sandbox_id for s in containerd.cri.list_pod_sandboxes())


def test_cpuset_drift_written_behind_the_runtime_is_visible(containerd: PrivateContainerd) -> None:
    pod = containerd.run_pod("besteffort")
    (cid,) = pod.container_ids
    original = CPUSet.parse(containerd.cgroup_cpuset(cid))
    drifted = CPUSet.parse(str(original.min()))
    containerd.write_cgroup_cpuset(cid, str(drifted))
    assert CPUSet.parse(containerd.cgroup_cpuset(cid)) == drifted
    assert CPUSet.parse(containerd.cpus_allowed_list(cid)) == drifted
    containerd.remove_pod(pod)


def test_restart_keeps_running_pods(containerd: PrivateContainerd) -> None:
    pod = containerd.run_pod("guaranteed", 1000, 1000)
    (cid,) = pod.container_ids
    pid_before = containerd.container_pid(cid)
    since = containerd.log_offset()
    containerd.restart()
    containerd.wait_for_log("Registered namespace .*k8s.io.* with NRI", since=since)
    assert containerd.container_pid(cid) == pid_before
    containerd.remove_pod(pod)


def test_plugin_that_dies_before_connecting_is_reported(containerd: PrivateContainerd) -> None:
    with pytest.raises(PluginError, match=r"exited with 3 before connecting[\s\S]*boom"):
        containerd.start_plugin(["sh", "-c", "echo boom; exit 3"], timeout=10)
