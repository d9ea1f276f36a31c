"""Fault drills on real containerd, both runtimes: the short CI profile (issue 20).

kill -9 of the plugin at random points of a lifecycle loop, containerd restarts, every hostile
checkpoint once, bad annotations with the plugin up and down, and an inspection flood during creates;
the truth check after each. Figures go to the e2e summary. The long profile is scripts/drill-faults
(NRI_PINNER_DRILL_KILLS / _RESTARTS / _FLOOD set the counts here too).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .drills import run_profile
from .harness import PrivateContainerd
from .pinner import start_pinner, wait_for

KILLS = int(os.environ.get("NRI_PINNER_DRILL_KILLS", "10"))
RESTARTS = int(os.environ.get("NRI_PINNER_DRILL_RESTARTS", "3"))
FLOOD = int(os.environ.get("NRI_PINNER_DRILL_FLOOD", "300"))
ROUNDS = 6


def test_fault_drills_short_profile(containerd: PrivateContainerd) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="drill-", dir="/tmp"))  # short: unix socket paths
    figures = run_profile(containerd, workdir, kills=KILLS, restarts=RESTARTS, flood=FLOOD)
    for line in figures.lines():
        print(line)
    assert figures.kills == KILLS and figures.restarts == RESTARTS


def test_pods_whose_containers_exit_on_their_own_are_removed_in_the_kubelets_order(
        containerd: PrivateContainerd) -> None:
    """Defect 6: RemoveContainer right after a container's own exit raced containerd's exit handling
    ("container is still running, to stop first"). remove_pod now waits for EXITED in ContainerStatus."""
    start_pinner(containerd)
    burst = containerd.run_pod("burstable", 250, 500)
    (b,) = burst.container_ids
    for _ in range(ROUNDS):
        short = containerd.run_pod("guaranteed", 1000, 1000, command=("sh", "-c", "sleep 0.5"))
        assert wait_for(lambda: containerd.cgroup_cpuset(b) == "0", timeout=10, interval=0.02)
        # remove the moment the process has exited (CRI says so before containerd's exit handling ends)
        sid = short.container_ids[0]
        assert wait_for(lambda: containerd.cri.container_state(sid) == "EXITED", timeout=20, interval=0.005)  # noqa: B023
        containerd.remove_pod(short, stop_timeout_s=2)
        # the pod's CPU stays its own until the pod goes (the kubelet's rule), then returns
        assert wait_for(lambda: containerd.cgroup_cpuset(b) == "0-1", timeout=20, interval=0.02)
    containerd.remove_pod(burst)


def test_guaranteed_container_created_while_down_is_pinned_when_cpus_free_up(containerd: PrivateContainerd) -> None:
    """Defect 3 on a real runtime: B (Guaranteed) starts while the plugin is down and CPU 1 is A's; at
    the restart B waits on the shared pool; when A goes, B gets CPU 1 (cgroup and the process itself)."""
    workdir = Path(tempfile.mkdtemp(prefix="repin-", dir="/tmp"))
    pinner = start_pinner(containerd, workdir)
    a = containerd.run_pod("guaranteed", 1000, 1000)
    assert pinner.assignment(a.container_ids[0])["cpus"] == "1"
    pinner.process.proc.kill()
    pinner.stop()
    b = containerd.run_pod("guaranteed", 1000, 1000)
    (bid,) = b.container_ids
    pinner = start_pinner(containerd, workdir)
    assert wait_for(lambda: containerd.cgroup_cpuset(bid) == "0", timeout=20)  # shared pool while it waits
    assert not pinner.assignment(bid)["exclusive"]
    containerd.remove_pod(a, stop_timeout_s=2)
    assert wait_for(lambda: pinner.assignment(bid)["exclusive"] and containerd.cgroup_cpuset(bid) == "1", timeout=20)
    assert wait_for(lambda: containerd.cpus_allowed_list(bid) == "1", timeout=5)
    print(f"e2e: containerd {containerd.version}: a Guaranteed container created while the plugin was down "
          "waited on the shared pool and was pinned to CPU 1 when it freed up")
    containerd.remove_pod(b, stop_timeout_s=2)
