"""The runtime's own record of a shared container follows the pool (issue: a rolling update leaves the
runtime's record wrong), on real containerd 1.7.24 and 2.1.x with real runc and cgroups.

containerd stores each container's create-time cpuset and hands it to runc on every later update. The
plugin narrows a shared container's cgroup when a Guaranteed container takes a CPU, which the record
never hears of; with the plugin away (a DaemonSet rolling update), a kubelet update that only sets
shares then makes runc write the stale set back — the shared container on the exclusive CPU until the
plugin returns. With `reconcile.runtime_record_quiet_seconds` on (the default), the record is brought
in line once the pool is quiet, so that update writes the current pool. Off, the defect shows.

2 CPUs with CPU 0 reserved: the Guaranteed container takes CPU 1, the pool narrows to CPU 0.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from .harness import PrivateContainerd
from .node_env import all_cpus, cpus_without, scaled
from .pinner import start_pinner, wait_for

ALL, SHARED = all_cpus(), cpus_without(1)


def recorded_cpus(runtime: PrivateContainerd, cid: str) -> str:
    """The cpuset containerd's record holds (its stored OCI spec, as CRI ContainerStatus shows it)."""
    _, info = runtime.cri.container_status(cid)
    spec: dict[str, Any] = info.get("runtimeSpec", {})
    return str(spec.get("linux", {}).get("resources", {}).get("cpu", {}).get("cpus", ""))


@pytest.mark.parametrize("quiet", [1.0, 0.0], ids=["records-follow", "records-off"])
def test_a_plugin_away_leaves_no_stale_record_for_runc_to_restore(containerd: PrivateContainerd,
                                                                  quiet: float) -> None:
    pinner = start_pinner(containerd, reconcile={"runtime_record_quiet_seconds": quiet})
    burst = containerd.run_pod("burstable", 250, 500)
    (b,) = burst.container_ids
    assert recorded_cpus(containerd, b) == ALL  # the create's set
    guar = containerd.run_pod("guaranteed", 1000, 1000)
    (g,) = guar.container_ids
    assert containerd.cpus_allowed_list(g) == "1"
    assert wait_for(lambda: containerd.cpus_allowed_list(b) == SHARED, timeout=scaled(2))
    narrowed = time.monotonic()
    if quiet:
        in_line = wait_for(lambda: recorded_cpus(containerd, b) == SHARED, timeout=scaled(10))
        assert in_line, recorded_cpus(containerd, b)
        print(f"\ncontainerd {containerd.version}: record in line {time.monotonic() - narrowed:.2f} s after the "
              f"pool narrowed (quiet {quiet} s)")
        assert recorded_cpus(containerd, g) == "1"  # an exclusive container's record was right all along
    else:
        time.sleep(scaled(2))
        assert recorded_cpus(containerd, b) == ALL  # nothing brings it in line: the defect below
    pinner.stop()
    # the kubelet's update of a shared container while the plugin is away (shares only, as a QoS update)
    containerd.cri.update_container_resources(b, cpu_shares=256)
    held = containerd.cpus_allowed_list(b)
    if quiet:
        assert held == SHARED, f"runc restored {held}: the exclusive CPU 1 is shared again"
    else:
        assert held == ALL  # runc wrote the create-time record back: the shared container on CPU 1

