"""No false drift (issue 45): a container created and not started yet is not checked for drift.

On containerd a created container has no cgroup: runc makes it inside CRI StartContainer, before
the runtime tells plugins. The issue's false repairs (`actual "" desired "2-3" path cri`) came from
that window under TCG: the scope made, its `cpuset.cpus` not written yet (empty: the parent's CPUs).
The window is too short to hit on purpose, so this test stands in for runc mid-create: it makes the
created container's cgroup itself, empty, and keeps it through two drift periods, each proven to
have passed by a repair of the shared container it drifts on purpose (onto every CPU; with the pool
on the QoS slices, whose containers' own sets hold every CPU, down to the pool). Then the cgroup goes, the
container is started (runc makes the real one) and pinned, and one more period passes. Every repair
logged and counted is the shared container's: none is the created one's.
"""

from __future__ import annotations

import json
from typing import Any

from nri_pinner.engine.cpuset import CPUSet
from tests.e2e.harness import PrivateContainerd
from tests.e2e.node_env import online_cpus
from tests.e2e.pinner import Pinner, start_pinner, wait_for


def drift_repairs(pinner: Pinner) -> list[dict[str, Any]]:
    """The plugin's `cpuset drift repaired` lines (JSON logs)."""
    found = []
    for line in pinner.process.log_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == "cpuset drift repaired":
            found.append(entry)
    return found


def test_a_created_container_is_not_checked_for_drift_until_it_starts(containerd: PrivateContainerd) -> None:
    pinner = start_pinner(containerd)  # a drift check every second, repairs through CRI (NRI < v0.12.1)
    burst = containerd.run_pod("burstable", 250, 500)
    (b,) = burst.container_ids
    guar = containerd.run_pod("guaranteed", 1000, 1000, start=False)
    (g,) = guar.container_ids
    exclusive = CPUSet.parse(pinner.assignment(g)["cpus"])
    shared = str(online_cpus() - exclusive)
    # its own set: the pool, or the whole node below a QoS slice holding the pool (then drift narrows it)
    own = pinner.own_cpuset(b, shared)
    drift = shared if own != shared else str(online_cpus())
    assert wait_for(lambda: (pinner.shared_cpus(b), containerd.cgroup_cpuset(b)) == (shared, own), timeout=5), \
        (pinner.shared_cpus(b), containerd.cgroup_cpuset(b))

    def one_drift_period() -> None:
        """The shared container's own set drifted, and back: a drift check ran meanwhile."""
        containerd.write_cgroup_cpuset(b, drift)
        assert wait_for(lambda: containerd.cgroup_cpuset(b) == own, timeout=5), containerd.cgroup_cpuset(b)
        assert pinner.shared_cpus(b) == shared

    half_made = containerd.cgroup_dir(g)
    assert not half_made.exists(), f"{half_made}: a created container has no cgroup on containerd"
    half_made.mkdir()  # runc mid-create: the scope exists, its cpuset not written yet
    try:
        held = (half_made / "cpuset.cpus").read_text().strip()
        assert held == "", f"{half_made}/cpuset.cpus holds {held!r}: not the empty set runc leaves"
        for _ in range(2):
            one_drift_period()
        assert containerd.cri.container_state(g) == "CREATED"
    finally:
        half_made.rmdir()
    containerd.cri.start_container(g)
    assert containerd.cpus_allowed_list(g) == containerd.cgroup_cpuset(g) == str(exclusive)
    one_drift_period()  # started now: checked, and holding its set
    assert containerd.cgroup_cpuset(g) == str(exclusive)

    # the count and the log agree once the log is written out (a line can trail its repair under TCG)
    counted = wait_for(lambda: pinner.status()["health"]["reconcile_repairs"] == len(drift_repairs(pinner)),
                       timeout=5)
    repaired = drift_repairs(pinner)
    print(f"\ncontainerd {containerd.version}: {guar.name} created on {exclusive}, unstarted through two drift "
          f"periods; repairs logged: {[(r['container_id'], r['actual'], r['path']) for r in repaired]}")
    assert [r for r in repaired if r["container_id"] == g[:12]] == []
    assert len(repaired) >= 3 and {r["container_id"] for r in repaired} == {b[:12]}
    assert counted, (pinner.status()["health"]["reconcile_repairs"], len(repaired))  # a skipped check is no repair
    containerd.remove_pod(guar)
    containerd.remove_pod(burst)
