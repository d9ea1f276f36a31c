"""nri-pinner as a node runs it: real containerd (1.7.24 and 2.1.x), real runc, real cgroups.

This VM has 2 CPUs, so the scenario reserves CPU 0 and hands out one exclusive CPU (CPU 1); on a
bigger node (the VM tier's guest) the shared pool is every other CPU: ALL, and SHARED once CPU 1 is
exclusive (node_env).
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from .harness import PrivateContainerd
from .node_env import all_cpus, cpus_without
from .pinner import Pinner, start_pinner, wait_for

# 20 s in ./scripts/test (the CI budget); the long run: NRI_PINNER_E2E_CHURN_SECONDS=60 (README Development)
CHURN_SECONDS = float(os.environ.get("NRI_PINNER_E2E_CHURN_SECONDS", "20"))
ALL = all_cpus()  # "0-1" on this VM
SHARED = cpus_without(1)  # the shared pool while CPU 1 is exclusive: "0" on this VM


def _cpus(pinner: Pinner, cid: str) -> tuple[str, str]:
    """Where the container's process may run, and where its cgroup lets it (Pinner.shared_cpus)."""
    return pinner.runtime.cpus_allowed_list(cid), pinner.shared_cpus(cid)


def test_guaranteed_exclusive_shared_shrinks_and_grows_in_band(containerd: PrivateContainerd) -> None:
    pinner = start_pinner(containerd)
    burst = containerd.run_pod("burstable", 250, 500)
    (b,) = burst.container_ids
    assert _cpus(pinner, b) == (ALL, ALL)
    assert pinner.assignment(b)["exclusive"] is False

    guar = containerd.run_pod("guaranteed", 1000, 1000)
    (g,) = guar.container_ids
    # The Guaranteed container's exclusive CPU, and the Burstable one shrunk in the same CreateContainer reply:
    # no reconcile needed, so check at once.
    assert _cpus(pinner, g) == ("1", "1")
    assert _cpus(pinner, b) == (SHARED, SHARED)
    doc = pinner.status()
    assert doc["pools"]["shared"] == SHARED and doc["pools"]["exclusive"] == "1" and doc["pools"]["reserved"] == "0"
    table = pinner.status(as_json=False)
    assert guar.name in table and "exclusive" in table
    print(f"\ncontainerd {containerd.version}: status with a Guaranteed and a Burstable pod:\n{table}")

    containerd.remove_pod(guar)
    # The stop gives the pool back to the Burstable container, without a restart: a widening is
    # written after the syncer's settle (README "Pool changes": never urgent), so within ~0.1 s.
    assert wait_for(lambda: _cpus(pinner, b) == (ALL, ALL), timeout=2.0), _cpus(pinner, b)
    assert pinner.status()["pools"]["shared"] == ALL
    containerd.remove_pod(burst)


def test_strict_reservation_keeps_reserved_cpu_out_of_shared_pool(containerd: PrivateContainerd) -> None:
    pinner = start_pinner(containerd, cpu_manager={"policy_options": ["strict-cpu-reservation"]})
    burst = containerd.run_pod("besteffort")
    (b,) = burst.container_ids
    assert _cpus(pinner, b) == (cpus_without(0), cpus_without(0))
    containerd.remove_pod(burst)


def test_restart_rebuilds_from_synchronize_and_corrupt_checkpoint(containerd: PrivateContainerd) -> None:
    pinner = start_pinner(containerd)
    guar = containerd.run_pod("guaranteed", 1000, 1000)
    burst = containerd.run_pod("burstable", 100, 0)
    (g,), (b,) = guar.container_ids, burst.container_ids
    pinner.stop()
    pinner.checkpoint.write_bytes(b"{ corrupt")
    workdir = pinner.checkpoint.parent
    pinner = start_pinner(containerd, workdir)
    assert pinner.assignment(g)["exclusive"] is True and pinner.assignment(g)["cpus"] == "1"
    assert _cpus(pinner, b) == (SHARED, SHARED)
    log = pinner.process.log_text()
    assert "checkpoint not used" in log and "not JSON" in log
    # new containers are still pinned after the restart
    containerd.remove_pod(guar)
    assert wait_for(lambda: _cpus(pinner, b) == (ALL, ALL), timeout=2.0), _cpus(pinner, b)
    containerd.remove_pod(burst)


def test_rejected_admission_fails_the_create(containerd: PrivateContainerd) -> None:
    pinner = start_pinner(containerd, cpu_manager={"policy_options": ["full-pcpus-only"]},
                          topology_manager={"policy": "single-numa-node"})
    # one free CPU on this VM: no NUMA hint can hold 2 exclusive CPUs, so the kubelet's own
    # single-numa-node admission would fail the pod; the create fails with that reason
    with pytest.raises(Exception, match=r"nri-pinner: TopologyAffinityError"):
        containerd.run_pod("guaranteed", 2000, 2000)
    guar = containerd.run_pod("guaranteed", 1000, 1000)
    assert _cpus(pinner, guar.container_ids[0]) == ("1", "1")
    containerd.remove_pod(guar)


def test_drift_repaired_through_cri_under_pod_churn(containerd: PrivateContainerd) -> None:
    pinner = start_pinner(containerd)
    burst = containerd.run_pod("burstable", 250, 500)
    (b,) = burst.container_ids
    stop = threading.Event()
    cycles, errors = [0], []

    def churn() -> None:
        while not stop.is_set():
            try:
                pod = containerd.run_pod("besteffort")
                containerd.remove_pod(pod, stop_timeout_s=2)
                cycles[0] += 1
            except Exception as exc:  # recorded; the assertion below reports them
                errors.append(repr(exc))
                time.sleep(0.5)

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    drifts = repaired = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < CHURN_SECONDS:
            containerd.write_cgroup_cpuset(b, "1")  # behind the plugin's back
            drifts += 1
            # Under the systemd driver a repair has two writers: systemd realizing the scope we
            # told, then our own write. The next drift waits for the repair to be counted, so a
            # late write of this repair cannot pass for the repair of the next drift.
            if wait_for(lambda: containerd.cgroup_cpuset(b) == ALL, timeout=5, interval=0.05) and \
                    wait_for(lambda n=drifts: pinner.status()["health"]["reconcile_repairs"] >= n,
                             timeout=5, interval=0.1):
                repaired += 1
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started) % 1.0))
    finally:
        stop.set()
        worker.join(30)
    elapsed = time.monotonic() - started
    health = pinner.status()["health"]
    print(f"\ncontainerd {containerd.version}: churn {elapsed:.0f}s, {cycles[0]} pod cycles, "
          f"{drifts} drifts written, {repaired} repaired, plugin repairs {health['reconcile_repairs']}, "
          f"errors {len(errors)}")
    assert not worker.is_alive(), "a CRI lifecycle call hung"
    assert not errors, errors[:3]
    assert repaired == drifts
    assert health["connected"] and health["synchronized"]
    assert health["reconcile_repairs"] == drifts  # one repair per drift, none without one
    # still registered and pinning
    guar = containerd.run_pod("guaranteed", 1000, 1000)
    assert _cpus(pinner, guar.container_ids[0]) == ("1", "1")
    containerd.remove_pod(guar)
    containerd.remove_pod(burst)


def test_resize_through_cri_keeps_the_assignment(containerd: PrivateContainerd) -> None:
    pinner = start_pinner(containerd)
    guar = containerd.run_pod("guaranteed", 1000, 1000)
    burst = containerd.run_pod("burstable", 250, 500)
    (g,), (b,) = guar.container_ids, burst.container_ids
    # a kubelet in-place resize sends full resources; the cpuset stays as assigned
    containerd.cri.update_container_resources(b, cpu_shares=512, cpu_quota=80000, cpu_period=100000)
    assert _cpus(pinner, b) == (SHARED, SHARED) and _cpus(pinner, g) == ("1", "1")
    containerd.cri.update_container_resources(g, cpu_shares=1024, cpu_quota=100000, cpu_period=100000)
    assert _cpus(pinner, g) == ("1", "1")
    assert pinner.assignment(g)["exclusive"] is True
    containerd.remove_pod(guar)
    containerd.remove_pod(burst)


def test_an_exited_container_keeps_its_cpus_until_its_pod_goes(containerd: PrivateContainerd) -> None:
    """The kubelet releases an exited container's exclusive CPUs only with its pod (v1.32
    cpu_manager.go reconcileState skips terminated containers, removeStaleState keeps every container
    of an active pod): StopContainer, which arrives when the process exits, keeps them; StopPodSandbox
    gives them back."""
    pinner = start_pinner(containerd)
    burst = containerd.run_pod("burstable", 250, 500)
    (b,) = burst.container_ids
    short = containerd.run_pod("guaranteed", 1000, 1000, command=("sh", "-c", "sleep 2"))
    containerd.cri.wait_exited(short.container_ids[0], timeout=20)
    time.sleep(0.5)  # past the StopContainer reply
    assert _cpus(pinner, b) == (SHARED, SHARED)
    containerd.remove_pod(short, stop_timeout_s=2)
    assert wait_for(lambda: pinner.shared_cpus(b) == ALL, timeout=20), pinner.shared_cpus(b)
    assert containerd.cpus_allowed_list(b) == ALL
    containerd.remove_pod(burst)


def test_preinstalled_nri_pinner_launched_by_containerd(containerd: PrivateContainerd,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from .pinner import preinstalled

    with preinstalled(containerd, monkeypatch) as pinner:
        burst = containerd.run_pod("burstable", 250, 500)
        guar = containerd.run_pod("guaranteed", 1000, 1000)
        (b,), (g,) = burst.container_ids, guar.container_ids
        assert _cpus(pinner, g) == ("1", "1") and _cpus(pinner, b) == (SHARED, SHARED)
        status = pinner.status()
        assert status["health"]["mode"] == "pre-installed"
        print(f"\ncontainerd {containerd.version}: pre-installed nri-pinner launched by containerd pins "
              f"{guar.name} on {status['pools']['exclusive']}")
        containerd.remove_pod(guar)
        containerd.remove_pod(burst)
