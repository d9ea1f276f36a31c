"""Pool changes and the replies around them, at the core (README "Pool changes", "Our updates and the
kubelet's"). (Were rule tests of tests/service/test_cgroup_pool.py, through the whole stack on a
cgroup-v1 tree in tmp; the writer, its files, threads and timing stay there.)"""

from __future__ import annotations

import pytest
from core_harness import container, cpus_of, create, make_core, mems_for, park_token, passes, pod, timers, updates_of

from nri_pinner.core import events as ev
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CpusetUpdate

BPOD, GPOD = pod("burst", "burstable"), pod("gold")
B, LATE = container(BPOD, "app", 100), container(BPOD, "late", 100)
G = container(GPOD, "app", 2000, 2000)


def update(c: api.Container, p: api.PodSandbox, shares: int, cpus: str) -> ev.UpdateContainer:
    """An update as containerd relays it: its merged spec, which keeps the create's cpuset."""
    req = api.UpdateContainerRequest(pod=p, container=c)
    req.linux_resources.cpu.shares.value = shares
    req.linux_resources.cpu.cpus = cpus
    return ev.UpdateContainer(req)


def test_a_start_waits_for_the_pass_after_its_own_create_not_for_later_changes() -> None:
    """A Burstable create between the Guaranteed create and its start changes no started cgroup:
    the start must not run (or wait for) a pass of its own."""
    e = make_core()
    e.run(BPOD, B)
    pool = e.topology.online - cpus_of(e.handle(create(GPOD, G)).reply)
    e.settle()  # the pass for G has narrowed B
    assert e.cgroups[B.id] == pool
    count = e.core.passes.count
    e.handle(create(BPOD, LATE))  # a newer generation; nothing started changes
    out = e.handle(ev.StartContainer(G.id))
    assert out.reply is None and passes(out) == []  # answered at once, no pass of its own
    assert e.core.passes.count == count and e.cgroups[B.id] == pool


def test_every_update_is_answered_with_the_current_cpuset() -> None:
    """The rule that tells our cpuset-only updates from a kubelet resize (README), both directions."""
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    pool = online - e.run(GPOD, G)
    current = {B.id: CpusetUpdate(B.id, str(pool), mems_for(e.topology, pool))}
    # kubelet resize: shares set; containerd's stored spec still has the create's cpuset;
    # a cpuset-only update asking for what we want (our own CRI repair coming back);
    # a cpuset-only update from someone else (undone): all three get the current cpuset back
    for shares, asked in ((512, online), (0, pool), (0, online)):
        assert updates_of(e.handle(update(B, BPOD, shares, str(asked))).reply) == current


@pytest.mark.parametrize("timeout", [2.0, 10.0])
def test_the_start_waits_for_the_pass_half_the_runtimes_request_timeout(timeout: float) -> None:
    """1 s under containerd's default 2 s; an emulated node's runtime given 10 s waits 5 s, so a slow
    pass is not taken for a late one while the StartContainer reply still makes the deadline."""
    e = make_core(request_timeout_ms=int(timeout * 1000))
    assert e.core.passes.wait_seconds == timeout / 2
    e.run(BPOD, B)
    e.handle(create(GPOD, G))
    out = e.handle(ev.StartContainer(G.id))
    assert (f"wait:{park_token(out.reply)}", timeout / 2) in timers(out)
