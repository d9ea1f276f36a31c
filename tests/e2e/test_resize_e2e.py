"""In-place resize on real containerd (1.7.24 and 2.1.x), real runc, real cgroups (README "Resize").

CRI UpdateContainerResources as the kubelet sends a resize (shares + quota/period), reaching the
plugin as NRI UpdateContainer. 2 CPUs with CPU 0 reserved: one CPU (1) can be exclusive, so a
grow to 2 is refused (on a bigger node: a grow to every CPU). After each step the Cpus_allowed_list
of the container and its neighbour.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import pytest

from . import host_cleanup as hc
from .harness import PrivateContainerd
from .node_env import all_cpus, cpus_without, online_cpus
from .pinner import start_pinner, wait_for

PERIOD = 100_000
ROUNDS = 3
ALL = all_cpus()  # "0-1" on this VM
SHARED = cpus_without(1)  # "0" on this VM: the neighbour's pool while CPU 1 is exclusive


def _resize(runtime: PrivateContainerd, cid: str, milli: int) -> None:
    """The kubelet's resize of a Guaranteed container: request = limit (MilliCPUToShares, MilliCPUToQuota)."""
    runtime.cri.update_container_resources(cid, cpu_shares=milli * 1024 // 1000, cpu_quota=milli * PERIOD // 1000,
                                           cpu_period=PERIOD)


def _quota(runtime: PrivateContainerd, cid: str) -> int:
    """The container's cpu.cfs_quota_us (cgroup v1 cpu controller; v2: the first field of cpu.max, whose
    "max" is v1's -1: first read in the VM tier's cgroup v2 guest, where int("max") failed)."""
    cgroup = runtime.cgroup_dir(cid, "cpu")
    v1 = cgroup / "cpu.cfs_quota_us"
    text = v1.read_text() if hc.CGROUP_ROOT.joinpath("cpu").is_dir() else (cgroup / "cpu.max").read_text().split()[0]
    return -1 if text.strip() == "max" else int(text)


def test_resize_fractional_to_exclusive_and_back_and_a_refused_grow(containerd: PrivateContainerd) -> None:
    pinner = start_pinner(containerd)
    burst = containerd.run_pod("burstable", 250, 500)
    guar = containerd.run_pod("guaranteed", 500, 500)
    (b,), (g,) = burst.container_ids, guar.container_ids

    def allowed() -> tuple[str, str]:
        return containerd.cpus_allowed_list(g), containerd.cpus_allowed_list(b)

    assert allowed() == (ALL, ALL)

    _resize(containerd, g, 1000)  # shared -> exclusive: no CFS quota (the kubelet asked for 100000)
    assert allowed() == ("1", SHARED) and _quota(containerd, g) == -1
    assert containerd.cgroup_cpuset(g) == "1" and pinner.shared_cpus(b) == SHARED
    doc = pinner.assignment(g)
    assert (doc["exclusive"], doc["cpus"], doc["resize"]["outcome"]) == (True, "1", "to-exclusive")

    offset = containerd.log_offset()
    with pytest.raises(grpc.RpcError) as refused:
        _resize(containerd, g, 1000 * len(online_cpus()))  # more than is left to grow into: refused
    text = str(refused.value.details())
    print(f"\ncontainerd {containerd.version}: refused grow -> {refused.value.code()}: {text}")
    assert "InsufficientCPUs" in text and "keeps CPUs 1" in text
    assert allowed() == ("1", SHARED) and _quota(containerd, g) == -1  # runc update never ran: old quota
    doc = pinner.assignment(g)
    assert (doc["cpus"], doc["resize"]["outcome"], doc["resize"]["reason"]) == ("1", "refused", "InsufficientCPUs")
    log = containerd.log_text(offset)
    assert "closing plugin" not in log and pinner.status()["health"]["connected"] is True  # still attached

    _resize(containerd, g, 500)  # exclusive -> shared: both on every CPU again
    # the container's own set comes with the update, and the kubelet's quota again (500m x period); the
    # neighbour's widening after the syncer's settle (never urgent, README "Pool changes")
    assert containerd.cpus_allowed_list(g) == ALL and _quota(containerd, g) == PERIOD // 2
    assert wait_for(lambda: allowed() == (ALL, ALL), timeout=2.0), allowed()
    assert pinner.assignment(g)["resize"]["outcome"] == "to-shared"
    assert pinner.status()["pools"]["shared"] == ALL

    _resize(containerd, g, 1000)  # and once more: the plugin answers after the refusal
    assert allowed() == ("1", SHARED)
    containerd.remove_pod(guar)
    assert wait_for(lambda: containerd.cpus_allowed_list(b) == ALL, timeout=2.0)
    containerd.remove_pod(burst)


def _allowed_of(status: Path) -> str:
    for line in status.read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return ""


def test_no_sample_shares_the_cpu_a_resize_made_exclusive(containerd: PrivateContainerd) -> None:
    """The window, sampled: while a Guaranteed container is resized 500m -> 1 CPU and back, a thread
    reads the resized container's Cpus_allowed_list, then its neighbour's. Once the resized container
    is confined to CPU 1 (first read), the neighbour's read after it must not include CPU 1: the
    neighbour was narrowed before the resized container was."""
    start_pinner(containerd)
    guar = containerd.run_pod("guaranteed", 500, 500)  # created first: the order of the pass is not creation order
    burst = containerd.run_pod("burstable", 250, 500)
    (b,), (g,) = burst.container_ids, guar.container_ids
    g_status, b_status = (Path(f"/proc/{containerd.container_pid(c)}/status") for c in (g, b))
    samples: list[tuple[float, float, str, str]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            began = time.monotonic()
            first, neighbour = _allowed_of(g_status), _allowed_of(b_status)
            samples.append((began, time.monotonic(), first, neighbour))

    windows: list[tuple[float, float]] = []
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for _ in range(ROUNDS):
            began = time.monotonic()
            _resize(containerd, g, 1000)
            assert containerd.cpus_allowed_list(g) == "1"
            time.sleep(0.2)
            windows.append((began, time.monotonic()))
            _resize(containerd, g, 500)
            assert wait_for(lambda: containerd.cpus_allowed_list(b) == ALL, timeout=2.0)
    finally:
        stop.set()
        sampler.join(5)
    # both reads inside a window: after the resize call began, before the call back to 500m began
    inside = [s for s in samples if any(lo <= s[0] and s[1] < hi for lo, hi in windows)]
    exclusive = [s for s in inside if s[2] == "1"]
    leaks = [s for s in exclusive if s[3] != SHARED]
    print(f"\ncontainerd {containerd.version}: resize window check, {len(samples)} samples, {len(exclusive)} with the "
          f"resized container on CPU 1, {len(leaks)} with its neighbour still on CPU 1")
    assert len(exclusive) >= ROUNDS and leaks == []
    containerd.remove_pod(guar)
    containerd.remove_pod(burst)


def test_update_of_a_container_the_restarted_plugin_never_synchronized(containerd: PrivateContainerd,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Pre-installed nri-pinner, containerd restarted under running pods (1.7.24 never synchronizes a
    pre-installed plugin; 2.1 does). The kubelet then resizes the burstable pod: containerd's stored
    spec still has its create-time cpuset (0-1, from before the Guaranteed pod took CPU 1), which
    runc applies unless the plugin's reply carries the shared pool. The plugin adopts it."""
    from .pinner import PLUGIN_NAME, preinstalled, wait_for

    with preinstalled(containerd, monkeypatch) as pinner:
        burst = containerd.run_pod("burstable", 250, 500)  # created first: on 0-1
        guar = containerd.run_pod("guaranteed", 1000, 1000)
        (b,), (g,) = burst.container_ids, guar.container_ids
        assert wait_for(lambda: pinner.shared_cpus(b) == SHARED, timeout=10)
        since = containerd.log_offset()
        containerd.restart()  # the pods keep running in their shims; the plugin is launched again
        containerd.wait_plugin_active(PLUGIN_NAME, since=since, timeout=30)
        containerd.cri.update_container_resources(b, cpu_shares=300, cpu_quota=50_000, cpu_period=PERIOD)
        allowed = containerd.cpus_allowed_list(b), containerd.cpus_allowed_list(g)
        print(f"\ncontainerd {containerd.version}: after the restart, the burstable pod's resize leaves it on "
              f"{allowed[0]} (Guaranteed on {allowed[1]})")
        assert allowed == (SHARED, "1")
        doc = pinner.assignment(b)
        assert doc["exclusive"] is False
        containerd.remove_pod(guar)
        containerd.remove_pod(burst)
