"""Cgroup passes at the core: a pool that only widens waits longer before its pass; a write that
failed (or that systemd would undo) leaves the container to the next reply's NRI update
(core/passes.py, core/reply_updates.py)."""

from __future__ import annotations

import pytest
from core_harness import (
    SETTLE,
    SETTLE_WIDEN,
    container,
    create,
    make_core,
    mems_for,
    park_token,
    passes,
    pod,
    resize,
    settle_timers,
    timers,
    updates_of,
)

from nri_pinner.core import events as ev
from nri_pinner.core.effects import Refusal
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.handlers import CpusetUpdate, CreateReply

BPOD, GPOD, XPOD = pod("burst", "burstable"), pod("gold"), pod("extra", "besteffort")
B = container(BPOD, "app", 500, 1000)
B2 = container(BPOD, "side", 100)
G = container(GPOD, "app", 2000, 2000)
PLAIN = pod("plain", "plain")
PLAIN.annotations["nri-pinner.io/exclusive-cpus.app"] = "2"
P = container(PLAIN, "app")


@pytest.mark.parametrize("release", ["stop-pod", "remove-pod", "last-removal", "plain-stop"])
def test_a_pass_that_only_widens_the_pool_settles_longer(release: str) -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    sandbox, c = (PLAIN, P) if release == "plain-stop" else (GPOD, G)
    mine = e.run(sandbox, c)
    if release == "last-removal":
        e.handle(ev.StopContainer(G.id))
        e.settle()
    events: dict[str, ev.Event] = {"stop-pod": ev.StopPodSandbox(GPOD), "remove-pod": ev.RemovePodSandbox(GPOD),
                                   "last-removal": ev.RemoveContainer(G.id), "plain-stop": ev.StopContainer(P.id)}
    event = events[release]

    out = e.handle(event)
    assert e.pool == online
    assert passes(out) == [] and settle_timers(out) == [SETTLE_WIDEN]  # no shared container loses a CPU
    out = e.fire(SETTLE_WIDEN[0])
    [p] = passes(out)
    assert not p.urgent
    [item] = p.items
    assert item.container_id == B.id and item.cpus == online
    assert item.known is not None and item.known[0] == online - mine  # it only gains CPUs


@pytest.mark.parametrize("failure", ["error", "untold"])
def test_a_failed_write_rides_on_the_next_reply(failure: str) -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    e.run(BPOD, B2)
    reply = e.handle(create(GPOD, G)).reply
    assert isinstance(reply, CreateReply)
    pool = online - CPUSet.parse(reply.cpus)
    e.fire(SETTLE[0])
    why = {B.id: "EACCES: permission denied" if failure == "error" else "systemd: scope properties refused"}
    e.write(errors=why if failure == "error" else None, untold=why if failure == "untold" else None)
    assert e.core.node.via_reply == {B.id}
    assert e.cgroups[B2.id] == pool

    # the next reply (here: a create's) carries B's cpuset as an NRI update, that may fail alone
    x = container(XPOD, "app")
    reply = e.handle(create(XPOD, x)).reply
    assert updates_of(reply) == {B.id: CpusetUpdate(B.id, str(pool), mems_for(e.topology, pool), True)}
    assert e.core.node.via_reply == set()
    # ... once
    reply = e.handle(create(XPOD, container(XPOD, "two"))).reply
    assert updates_of(reply) == {}


def test_a_write_that_succeeded_is_not_resent_in_replies() -> None:
    e = make_core()
    e.run(BPOD, B)
    e.handle(create(GPOD, G))
    e.settle()
    reply = e.handle(create(XPOD, container(XPOD, "app"))).reply
    assert updates_of(reply) == {}


def test_a_result_for_another_pass_is_ignored() -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    e.handle(create(GPOD, G))
    [p] = passes(e.fire(SETTLE[0]))
    out = e.handle(ev.CgroupsWritten(p.pass_id + 100, [ev.WriteResult(B.id, online, (0, 1), error="x")]))
    assert out.effects == [] and e.core.node.via_reply == set()
    e.write()  # its own result still lands
    assert e.core.node.told[B.id][0] == e.pool


def test_a_change_undone_while_its_pass_is_in_flight_is_written_back() -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    mine = e.run(GPOD, G)
    assert e.cgroups[B.id] == online - mine
    g2pod = pod("gold2")
    g2 = container(g2pod, "app", 2000, 2000)
    e.handle(create(g2pod, g2))
    assert len(passes(e.fire(SETTLE[0]))) == 1  # narrows B by G2's CPUs
    e.handle(ev.RemoveContainer(g2.id))  # G2 goes (never started) while that pass is in flight
    e.write()
    e.settle()
    assert e.cgroups[B.id] == online - mine  # B must get G2's CPUs back


def test_await_pass_is_answered_by_the_pass_for_the_newest_change() -> None:
    e = make_core()
    e.run(BPOD, B)
    e.handle(create(GPOD, G))
    token = park_token(e.handle(ev.AwaitPass()).reply)
    e.write()
    assert e.resolves == {token: True}
    assert e.handle(ev.AwaitPass()).reply is True  # nothing left to write: at once


def test_await_pass_after_a_refusal_is_answered_when_the_pass_in_flight_returns() -> None:
    e = make_core()
    e.run(BPOD, B)
    e.run(GPOD, G)
    g2pod = pod("gold2")
    e.handle(create(g2pod, container(g2pod, "app", 2000, 2000)))
    assert len(passes(e.fire(SETTLE[0]))) == 1  # a background pass in flight
    assert isinstance(e.handle(resize(GPOD, G, 24_000)).reply, Refusal)
    token = park_token(e.handle(ev.AwaitPass()).reply)
    e.write()
    e.settle()
    assert e.resolves.get(token) is True


def test_a_settle_a_pass_already_covered_never_writes_a_later_widen_early() -> None:
    """A create arms the short settle; the exclusive start's own pass writes first; when the short
    settle's timer fires after the pool has only widened since (a stop), it must not write the widen
    then: that waits for the long settle (seen under two CPU burners, where the 2 ms timer ran late)."""
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    out = e.handle(create(GPOD, G))
    assert settle_timers(out) == [SETTLE]
    token = park_token(e.handle(ev.StartContainer(G.id)).reply)  # an urgent pass: the settle is void
    e.write()
    assert token in e.resolves and e.settles() == [SETTLE]  # its timer has not fired yet
    out = e.handle(ev.StopPodSandbox(GPOD))  # G's CPUs go back: the pool only widens
    assert settle_timers(out) == [SETTLE_WIDEN] and e.pool == online
    assert passes(e.fire(SETTLE[0])) == []  # the late short settle writes nothing
    [p] = passes(e.fire(SETTLE_WIDEN[0]))
    assert [(i.container_id, i.cpus) for i in p.items] == [(B.id, online)]


def test_a_fire_of_a_voided_settle_never_passes_for_the_next_one() -> None:
    """A settle timer whose pass an urgent one replaced may still fire after the next change armed a
    settle of the same kind (its fire already queued): it must not dispatch that change's pass early.
    Seen in tests/service/test_cgroup_pool.py, where the next settle was 3600 s and the pass came 1 ms on."""
    e = make_core()
    e.run(BPOD, B)
    out = e.handle(create(GPOD, G))
    [(stale, _)] = timers(out)[-1:]
    park_token(e.handle(ev.StartContainer(G.id)).reply)  # an urgent pass: that settle is void
    e.write()
    gold2 = pod("gold2")
    out = e.handle(create(gold2, container(gold2, "app", 2000, 2000)))  # narrows: a settle of the same kind
    assert settle_timers(out) == [SETTLE]
    assert passes(e.handle(ev.TimerFired(stale))) == []  # the old fire, queued late: no pass
    e.armed.pop(stale, None)
    assert len(passes(e.fire(SETTLE[0]))) == 1  # the new settle's own fire: the pass


def test_a_narrowing_change_during_a_long_settle_shortens_it() -> None:
    """The settle is decided again at each change: a narrowing change while a widen waits its 100 ms
    re-arms the 2 ms one (the old syncer's rule: a newer kick decides again)."""
    e = make_core()
    e.run(BPOD, B)
    e.run(GPOD, G)
    assert settle_timers(e.handle(ev.StopPodSandbox(GPOD))) == [SETTLE_WIDEN]
    gold2 = pod("gold2")
    out = e.handle(create(gold2, container(gold2, "app", 4000, 4000)))  # more than G had: narrows
    assert settle_timers(out) == [SETTLE]
    assert passes(e.fire(SETTLE_WIDEN[0])) == []  # replaced: its fire is ignored
    [p] = passes(e.fire(SETTLE[0]))
    assert p.items[0].container_id == B.id
