"""Container lifecycle at the core: admission (exclusive vs shared pool), exclusive starts parked until
a pass has narrowed their neighbours, and exited containers of kubelet pods keeping their CPUs for
their pod (README "Pool changes", core/lifecycle.py, core/roles.py)."""

from __future__ import annotations

import pytest
from core_harness import (
    SETTLE,
    container,
    create,
    expedited,
    make_core,
    mems_for,
    park_token,
    passes,
    pod,
    resolved,
    settle_timers,
    timers,
    updates_of,
)

from nri_pinner.core import events as ev
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.handlers import CpusetUpdate, CreateReply, UpdatesReply

BPOD, GPOD, G2POD, XPOD = pod("burst", "burstable"), pod("gold"), pod("gold2"), pod("extra", "besteffort")
B = container(BPOD, "app", 500, 1000)
G = container(GPOD, "app", 2000, 2000)
G2 = container(G2POD, "app", 2000, 2000)
X = container(XPOD, "app")  # BestEffort, created and never started: only a reply reaches it
RESERVED = CPUSet.parse("0")


def cores(cpus: CPUSet) -> set[int]:
    """The physical cores (c = {c, c+6}) ``cpus`` lie on."""
    return {c % 6 for c in cpus}


# ------------------------------------------------------------------------------------------- admission

def test_guaranteed_create_is_pinned_exclusively_and_burstable_gets_the_pool_without_its_cpus() -> None:
    e = make_core()
    online = e.topology.online

    reply = e.handle(create(GPOD, G)).reply
    assert isinstance(reply, CreateReply)
    mine = CPUSet.parse(reply.cpus)
    # 2 CPUs: one whole core, not the reserved one's, and the memory of its NUMA node only
    assert len(mine) == 2 and len(cores(mine)) == 1 and not mine & RESERVED
    assert reply.mems == mems_for(e.topology, mine) and "," not in reply.mems

    reply = e.handle(create(BPOD, B)).reply
    assert isinstance(reply, CreateReply)
    assert CPUSet.parse(reply.cpus) == online - mine  # the shared pool (with the reserved CPU) shrank by G's
    assert reply.mems == mems_for(e.topology, online - mine) == "0,1"

    # a second exclusive create: CPUs of its own, and the pool shrinks again; B (created, not started)
    # only learns it from this reply
    reply = e.handle(create(G2POD, G2)).reply
    assert isinstance(reply, CreateReply)
    theirs = CPUSet.parse(reply.cpus)
    assert len(theirs) == 2 and not theirs & mine and not theirs & RESERVED
    pool = online - mine - theirs
    assert updates_of(reply) == {B.id: CpusetUpdate(B.id, str(pool), mems_for(e.topology, pool), True)}
    assert e.pool == pool


def test_guaranteed_fractional_and_besteffort_creates_get_the_shared_pool() -> None:
    e = make_core()
    online = e.topology.online
    frac = container(GPOD, "frac", 500, 500)  # Guaranteed, not an integer CPU count
    for sandbox, c in ((GPOD, frac), (XPOD, X)):
        reply = e.handle(create(sandbox, c)).reply
        assert isinstance(reply, CreateReply) and CPUSet.parse(reply.cpus) == online
    assert e.pool == online


# ------------------------------------------------------------------------------------------- starts

def test_exclusive_start_is_parked_until_a_pass_has_narrowed_its_neighbours() -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    reply = e.handle(create(GPOD, G)).reply
    assert isinstance(reply, CreateReply)
    mine = CPUSet.parse(reply.cpus)
    assert e.cgroups[B.id] == online  # the settle has not fired yet

    out = e.handle(ev.StartContainer(G.id))
    token = park_token(out.reply)
    # a start waits: the settle is cut short, the pass goes at once, urgent
    [p] = passes(out)
    assert p.urgent
    assert [(i.container_id, i.cpus) for i in p.items] == [(B.id, online - mine)]
    assert (f"wait:{token}", 1.0) in timers(out)  # half of containerd's 2 s request timeout
    assert resolved(out) == {}

    out = e.write()
    assert resolved(out) == {token: None}  # StartContainer has no reply body
    assert e.cgroups[B.id] == online - mine
    # the settle armed by the create finds nothing left to write
    e.settle()
    assert e.resolves == {token: None}


def test_exclusive_start_after_its_pass_is_answered_at_once() -> None:
    e = make_core()
    e.run(BPOD, B)
    e.handle(create(GPOD, G))
    e.settle()  # the settle pass has narrowed B
    out = e.handle(ev.StartContainer(G.id))
    assert out.reply is None and passes(out) == []


def test_non_exclusive_start_is_answered_at_once() -> None:
    e = make_core()
    e.run(GPOD, G)
    e.handle(create(BPOD, B))
    out = e.handle(ev.StartContainer(B.id))
    assert out.reply is None and passes(out) == []


def test_start_parked_behind_a_background_pass_expedites_it() -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    reply = e.handle(create(GPOD, G)).reply
    assert isinstance(reply, CreateReply)
    [p] = passes(e.fire(SETTLE[0]))
    assert not p.urgent  # a background pass: nothing waits for it yet

    out = e.handle(ev.StartContainer(G.id))
    token = park_token(out.reply)
    assert expedited(out) == [p.pass_id] and passes(out) == []  # that pass, run at normal priority
    out = e.write()
    assert resolved(out) == {token: None}
    assert e.cgroups[B.id] == online - CPUSet.parse(reply.cpus)


def test_start_whose_pass_is_late_is_answered_at_the_wait_limit() -> None:
    e = make_core()
    e.run(BPOD, B)
    e.handle(create(GPOD, G))
    token = park_token(e.handle(ev.StartContainer(G.id)).reply)
    out = e.fire(f"wait:{token}")
    assert resolved(out) == {token: None}
    assert e.metrics.registry.get_sample_value("nri_pinner_late_handler_replies_total",
                                               {"method": "StartContainer"}) == 1
    e.write()  # the pass still comes back: nothing is answered twice (Edge checks)


# ------------------------------------------------------------------------------------------- settle

def test_create_arms_the_settle_timer_and_its_pass_writes_the_started_shared_containers() -> None:
    e = make_core()
    online = e.topology.online
    b2 = container(BPOD, "side", 100)
    e.run(BPOD, B)
    e.run(BPOD, b2)
    kept = e.run(G2POD, G2)  # exclusive, started: its cpuset does not change
    e.handle(create(XPOD, X))  # shared, not started: no cgroup to write
    e.settle()
    assert e.armed == {}

    out = e.handle(create(GPOD, G))
    assert isinstance(out.reply, CreateReply)
    mine = CPUSet.parse(out.reply.cpus)
    assert passes(out) == [] and settle_timers(out) == [SETTLE]  # not at once: the reply leaves first

    out = e.fire(SETTLE[0])
    [p] = passes(out)
    assert not p.urgent
    assert {i.container_id: i.cpus for i in p.items} == {B.id: online - kept - mine, b2.id: online - kept - mine}
    assert set(p.live) == {B.linux.cgroups_path, b2.linux.cgroups_path, G2.linux.cgroups_path}


def test_one_pass_in_flight_a_change_meanwhile_waits_for_its_result() -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    first = e.handle(create(GPOD, G)).reply
    assert isinstance(first, CreateReply)
    assert len(passes(e.fire(SETTLE[0]))) == 1

    second = e.handle(create(G2POD, G2))
    assert isinstance(second.reply, CreateReply)
    assert passes(second) == []
    for name in [n for n in e.armed if not n.startswith("wait:")]:
        assert passes(e.fire(name)) == []  # no timer starts a pass beside the one in flight

    e.write()  # the first comes back: now the second change is written
    assert e.cgroups[B.id] == online - CPUSet.parse(first.cpus)
    e.settle()
    assert e.cgroups[B.id] == online - CPUSet.parse(first.cpus) - CPUSet.parse(second.reply.cpus)


# ------------------------------------------------------------------------------------------- exits

@pytest.mark.parametrize("pod_end", [ev.StopPodSandbox, ev.RemovePodSandbox])
def test_exited_container_of_a_kubelet_pod_keeps_its_cpus_until_its_pod_goes(
        pod_end: type[ev.StopPodSandbox] | type[ev.RemovePodSandbox]) -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    mine = e.run(GPOD, G)
    e.handle(create(XPOD, X))

    out = e.handle(ev.StopContainer(G.id, exit_code=1))
    assert isinstance(out.reply, UpdatesReply) and X.id not in updates_of(out.reply)  # the pool did not grow
    e.settle()
    assert e.pool == online - mine and e.cgroups[B.id] == online - mine
    reply = e.handle(create(G2POD, G2)).reply  # another pod cannot have them
    assert isinstance(reply, CreateReply) and not CPUSet.parse(reply.cpus) & mine
    theirs = CPUSet.parse(reply.cpus)

    out = e.handle(pod_end(GPOD))
    assert out.reply is None
    pool = online - theirs
    assert e.pool == pool  # G's CPUs are back in the shared pool
    reply = e.handle(ev.StopContainer("no-such-container")).reply  # any later reply tells X
    assert updates_of(reply)[X.id] == CpusetUpdate(X.id, str(pool), mems_for(e.topology, pool), True)
    e.settle()
    assert e.cgroups[B.id] == pool


def test_exited_container_of_a_kubelet_pod_keeps_its_cpus_until_its_last_removal() -> None:
    e = make_core()
    online = e.topology.online
    mine = e.run(GPOD, G)
    e.handle(ev.StopContainer(G.id))
    assert e.pool == online - mine
    e.handle(ev.RemoveContainer(G.id))
    assert e.pool == online and G.id not in e.core.node.containers


def test_container_of_a_non_kubelet_pod_releases_its_cpus_at_stop() -> None:
    e = make_core()
    online = e.topology.online
    plain = pod("plain", "plain")
    plain.annotations["nri-pinner.io/exclusive-cpus.app"] = "2"  # how a plain pod asks for exclusive CPUs
    p = container(plain, "app")
    mine = e.run(plain, p)
    assert len(mine) == 2 and e.pool == online - mine
    e.handle(create(XPOD, X))

    out = e.handle(ev.StopContainer(p.id))
    assert isinstance(out.reply, UpdatesReply)
    assert e.pool == online
    assert updates_of(out.reply) == {X.id: CpusetUpdate(X.id, str(online), "0,1", True)}


def test_restarted_container_of_a_kubelet_pod_gets_its_kept_cpus_back() -> None:
    e = make_core()
    mine = e.run(GPOD, G)
    e.handle(ev.StopContainer(G.id, exit_code=137))
    again = container(GPOD, "app", 2000, 2000)
    again.id = "gold-app-restarted"
    reply = e.handle(create(GPOD, again)).reply
    assert isinstance(reply, CreateReply) and CPUSet.parse(reply.cpus) == mine
    assert G.id not in e.core.node.containers  # the new record replaced the old one
