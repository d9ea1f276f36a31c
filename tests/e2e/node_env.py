"""What kind of node the end-to-end harness runs on, from the environment (defaults: this host).

The host: cgroupfs driver, real-time speed. The VM tier's guest (tests/vm/parts/30-plugin-scenarios)
runs the same tests under the systemd driver (or cgroupfs on cgroup v2) on a TCG-emulated machine,
10-20x slower than native (a CRI RunPodSandbox 3-5 s, StartContainer 2-3 s), and sets:

    NRI_PINNER_E2E_CGROUP_DRIVER=systemd      # or cgroupfs (the default)
    NRI_PINNER_E2E_NRI_REQUEST_TIMEOUT=10s    # containerd plugin_request_timeout (host 2s)
    NRI_PINNER_E2E_NRI_REGISTRATION_TIMEOUT=20s  # plugin_registration_timeout (host 5s)
    NRI_PINNER_E2E_START_TIMEOUT=180          # containerd up and serving CRI (host 30 s)
    NRI_PINNER_E2E_TIME_SCALE=10              # every harness/test wait bound below x10
    NRI_PINNER_E2E_SYSTEMD_TIMEOUT=5          # the plugin's [reconcile] systemd_timeout_seconds (0.5)

Only upper bounds of waits scale: a check that something happens *before* an event (the pool window)
is never loosened. With a 10 s request timeout containerd 2.x tells the plugin (NRI v0.8 Configure), so
its start wait for the shared cgroups' pass is 5 s (half of it); containerd 1.7 (NRI v0.6.1) sends no
timeout and the plugin keeps its 2 s assumption (1 s start wait) whatever containerd is configured with.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from nri_pinner.engine.cpuset import CPUSet

from .kubelet_model import Node
from .procfs import memory_capacity_bytes

CGROUP_DRIVER = os.environ.get("NRI_PINNER_E2E_CGROUP_DRIVER", "cgroupfs")
if CGROUP_DRIVER not in ("cgroupfs", "systemd"):
    raise ValueError(f"NRI_PINNER_E2E_CGROUP_DRIVER={CGROUP_DRIVER!r}: cgroupfs or systemd")
SYSTEMD = CGROUP_DRIVER == "systemd"
NRI_REQUEST_TIMEOUT = os.environ.get("NRI_PINNER_E2E_NRI_REQUEST_TIMEOUT", "2s")
NRI_REGISTRATION_TIMEOUT = os.environ.get("NRI_PINNER_E2E_NRI_REGISTRATION_TIMEOUT", "5s")
START_TIMEOUT = float(os.environ.get("NRI_PINNER_E2E_START_TIMEOUT", "30"))
TIME_SCALE = float(os.environ.get("NRI_PINNER_E2E_TIME_SCALE", "1"))
SYSTEMD_TIMEOUT = os.environ.get("NRI_PINNER_E2E_SYSTEMD_TIMEOUT", "")  # "" = the plugin's default
# Issue 45's opt-in: every plugin a scenario starts holds the pool on the QoS slices unless the scenario
# says otherwise (pinner.config_text); its final counts go to NRI_PINNER_E2E_FINAL_COUNTS (final_counts.py).
POOL_ON_QOS_SLICES = os.environ.get("NRI_PINNER_E2E_POOL_ON_QOS_SLICES") == "1"


def scaled(seconds: float) -> float:
    """An upper bound of a wait, stretched on a slow (emulated) node."""
    return seconds * TIME_SCALE


def online_cpus() -> CPUSet:
    return CPUSet.parse(Path("/sys/devices/system/cpu/online").read_text().strip())


def cpus_without(*cpus: int) -> str:
    """This node's online CPUs less ``cpus``, as a cpuset string ("0" on the 2-CPU host without CPU 1)."""
    return str(online_cpus() - CPUSet(cpus))


def all_cpus() -> str:
    return str(online_cpus())


@functools.lru_cache(maxsize=8)
def kubelet_node(pod_logs_dir: Path) -> Node:
    """This host as a kubelet v1.32 would see it (kubelet_model.Node), with the harness's pod log dir."""
    cgroup = Path("/sys/fs/cgroup")
    v2 = (cgroup / "cgroup.controllers").exists()
    if v2:  # kuberuntime_container_linux.go:380-392: memory.swap.max in the kubelet's (here: our) own cgroup
        own = Path("/proc/self/cgroup").read_text().strip().split("\n")[0].split(":", 2)[2]
        swap = (cgroup / own.lstrip("/") / "memory.swap.max").exists()
    else:
        swap = (cgroup / "memory" / "memory.memsw.limit_in_bytes").exists()
    pages = Path("/sys/kernel/mm/hugepages")
    sizes = []
    for entry in os.listdir(pages) if pages.is_dir() else []:  # runc HugePageSizes: readdir order
        kib = int(entry.removeprefix("hugepages-").removesuffix("kB"))
        sizes.append(f"{kib >> 20}GB" if kib >= 1 << 20 else f"{kib >> 10}MB" if kib >= 1 << 10 else f"{kib}KB")
    possible = CPUSet.parse(Path("/sys/devices/system/cpu/possible").read_text().strip())
    throttled = tuple(c for c in sorted(possible) if Path(f"/sys/devices/system/cpu/cpu{c}/thermal_throttle").exists())
    resolv = Path("/etc/resolv.conf")
    return Node(
        memory_capacity=memory_capacity_bytes(),
        cgroup_driver=CGROUP_DRIVER,
        cgroup_v2=v2,
        swap_controller=swap,
        hugepage_sizes=tuple(sizes),
        thermal_throttle_cpus=throttled,
        resolv_conf=resolv.read_text() if resolv.exists() else "",
        pod_logs_dir=str(pod_logs_dir),
    )

