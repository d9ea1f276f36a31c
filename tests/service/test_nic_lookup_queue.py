"""Lookups queue for a fixed number of dispatchers (no semaphore): at most CONCURRENT_LOOKUPS run at once
(a Synchronize starts one per running pod), each on a fresh thread (the in-process reader may setns()
it, so a thread is never reused), and every one is answered. The reader here only records and waits:
what it reads is tested with real namespaces elsewhere (test_nic_netns.py, test_nic_lookup_service.py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from nri_pinner.edge.nic_lookup.lookup import CONCURRENT_LOOKUPS, NicLink, NicLookup
from nri_pinner.nri.gen import api_pb2 as api


def sandbox(i: int) -> api.PodSandbox:
    pod = api.PodSandbox(id=f"sb{i}", name=f"p{i}", namespace="default", uid=f"uid{i}")
    pod.linux.namespaces.add(type="network", path=f"/var/run/netns/cni-{i}")
    return pod


def test_lookups_run_at_most_four_at_once_each_on_a_fresh_thread() -> None:
    release = threading.Event()
    running, most = [0], [0]
    threads: list[threading.Thread] = []
    count = threading.Lock()  # the test's own bookkeeping, not the code under test

    def reader(path: str, sysfs_root: str, names: Sequence[str] | None) -> tuple[NicLink, ...]:
        with count:
            running[0] += 1
            most[0] = max(most[0], running[0])
            threads.append(threading.current_thread())
        release.wait(10)
        with count:
            running[0] -= 1
        return (NicLink("eth0", "veth"),)

    lookup = NicLookup(reader=reader)
    futures = [lookup.start(sandbox(i)) for i in range(3 * CONCURRENT_LOOKUPS)]
    deadline = threading.Event()
    for _ in range(100):
        if len(threads) >= CONCURRENT_LOOKUPS:
            break
        deadline.wait(0.02)
    deadline.wait(0.2)  # room for a fifth to start, were the bound broken
    assert most[0] == CONCURRENT_LOOKUPS
    release.set()
    results = [f.result(timeout=10) for f in futures]
    assert [r.links[0].name for r in results] == ["eth0"] * len(futures)
    assert most[0] == CONCURRENT_LOOKUPS
    assert len(set(threads)) == len(futures)  # each lookup on a thread of its own, never a dispatcher
    assert all(t.name == "nri-pinner-netns" for t in threads)
