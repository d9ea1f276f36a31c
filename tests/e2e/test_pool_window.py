"""The sharing window, sampled: while Guaranteed containers are created, started and removed on a real
containerd, a thread reads every shared container's cgroup `cpuset.cpus` and its process's
`Cpus_allowed_list` in a tight loop. Once a Guaranteed container's start has returned, no sample may
include its exclusive CPU until its removal begins (this VM: CPU 0 reserved, CPU 1 exclusive).

Pool changes are written into the shared containers' cgroups by the plugin's syncer thread, and the
Guaranteed container's StartContainer waits for them (README "Pool changes"): this is the check that
the wait is real on both runtimes, cgroup v1, cgroupfs driver.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from .harness import PrivateContainerd
from .node_env import all_cpus
from .pinner import start_pinner, wait_for
from .procfs import read_cpus_allowed_list

ROUNDS = 3
EXCLUSIVE_CPU = 1
ALL = all_cpus()  # "0-1" on this VM


def _has_exclusive(text: str) -> bool:
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        if part and int(lo) <= EXCLUSIVE_CPU <= int(hi or lo):
            return True
    return False


def _allowed(status: Path) -> str:
    for line in status.read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return ""


def test_no_sample_shares_an_exclusive_cpu_after_its_container_started(containerd: PrivateContainerd) -> None:
    pinner = start_pinner(containerd)
    shared = [containerd.run_pod("burstable", 250, 500) for _ in range(2)]
    ids = [cid for pod in shared for cid in pod.container_ids]
    # the CPUs each may run on: below a QoS slice the plugin holds, the effective set (Pinner.shared_cpus_file)
    files = [(pinner.shared_cpus_file(cid), Path(f"/proc/{containerd.container_pid(cid)}/status")) for cid in ids]
    assert all(f.exists() for f, _ in files)
    assert wait_for(lambda: all(pinner.shared_cpus(cid) == ALL for cid in ids), timeout=20)

    samples: list[tuple[float, str, str]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for cgroup, status in files:
                now = time.monotonic()
                samples.append((now, cgroup.read_text(), _allowed(status)))

    windows: list[tuple[float, float]] = []
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for _ in range(ROUNDS):
            guaranteed = containerd.run_pod("guaranteed", 1000, 1000)
            started = time.monotonic()  # the start has returned
            (g,) = guaranteed.container_ids
            assert pinner.assignment(g)["cpus"] == str(EXCLUSIVE_CPU)
            time.sleep(0.3)
            windows.append((started, time.monotonic()))
            containerd.remove_pod(guaranteed)
            assert wait_for(lambda: all(pinner.shared_cpus(cid) == ALL for cid in ids), timeout=20)
    finally:
        stop.set()
        sampler.join(5)
    inside = [s for s in samples if any(lo <= s[0] < hi for lo, hi in windows)]
    leaks = [s for s in inside if _has_exclusive(s[1]) or _has_exclusive(s[2])]
    print(f"\ncontainerd {containerd.version}: window check, {len(samples)} samples, {len(inside)} while a Guaranteed "
          f"container ran, {len(leaks)} including its exclusive CPU")
    assert len(inside) >= ROUNDS * len(files)  # the sampler really ran inside every window
    assert leaks == []
    assert read_cpus_allowed_list(containerd.container_pid(ids[0])) == ALL  # and the pool grew back
    for pod in shared:
        containerd.remove_pod(pod)
