"""In-place resize at the core (README "Resize", core/resizing.py): a grow's reply waits for the pass
that narrows the neighbours before it widens the container; a shrink is answered at once and its
pass narrows the container before it widens the pool; a refusal changes nothing."""

from __future__ import annotations

from core_harness import (
    container,
    create,
    make_core,
    mems_for,
    park_token,
    passes,
    pod,
    resize,
    resolved,
    timers,
    updates_of,
)

from nri_pinner.core import events as ev
from nri_pinner.core.effects import PassItem, Refusal, WriteCheckpoint
from nri_pinner.core.passes import widens_only
from nri_pinner.core.quotas import RESIZE_TIMER
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.handlers import CpusetUpdate, UpdatesReply

BPOD, GPOD = pod("burst", "burstable"), pod("gold")
B = container(BPOD, "app", 500, 1000)
G = container(GPOD, "app", 2000, 2000)


def narrowing_first(items: tuple[PassItem, ...]) -> bool:
    """No item that only widens its cgroup comes before one that takes CPUs away."""
    kinds = [widens_only(i.cpus, i.known) for i in items]
    return kinds == sorted(kinds)


def test_grow_is_parked_until_the_pass_has_narrowed_the_neighbours_and_widened_the_container() -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    mine = e.run(GPOD, G)

    out = e.handle(resize(GPOD, G, 4000))
    token = park_token(out.reply)
    [p] = passes(out)
    assert p.urgent  # a reply waits for it
    assert any(name == f"wait:{token}" for name, _ in timers(out))
    grown = e.core.node.desired(e.core.node.containers[G.id])[0]
    assert len(grown) == 4 and mine.issubset(grown)  # a grow keeps every CPU
    # the CPUs move from B to G: B loses them before G gets them
    assert [(i.container_id, i.cpus) for i in p.items] == [(B.id, online - grown), (G.id, grown)]
    assert narrowing_first(p.items) and not widens_only(p.items[0].cpus, p.items[0].known)

    out = e.write()
    reply = resolved(out)[token]
    assert isinstance(reply, UpdatesReply)
    # the reply carries the grown set (runc update writes it once more), its own update first, and no CFS
    # quota: the kubelet's update asks for 4 CPUs' worth (400000), the container stays exclusive (-1)
    assert reply.updates[0] == CpusetUpdate(G.id, str(grown), mems_for(e.topology, grown), cpu_quota=-1)
    assert e.cgroups == {B.id: online - grown, G.id: grown}


def test_shrink_is_answered_at_once_and_its_pass_narrows_the_container_before_the_pool() -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    e.run(GPOD, G)
    e.handle(resize(GPOD, G, 4000))
    e.write()
    grown = e.cgroups[G.id]
    assert len(grown) == 4

    out = e.handle(resize(GPOD, G, 2000))
    assert isinstance(out.reply, UpdatesReply) and passes(out) == []  # not parked
    smaller = CPUSet.parse(updates_of(out.reply)[G.id].cpus)
    assert len(smaller) == 2 and smaller.issubset(grown)
    e.fire(next(name for name, _ in timers(out) if name.startswith("settle")))
    [p] = e.in_flight
    assert [(i.container_id, i.cpus) for i in p.items] == [(G.id, smaller), (B.id, online - smaller)]
    assert narrowing_first(p.items) and widens_only(p.items[1].cpus, p.items[1].known)
    e.write()
    assert e.cgroups == {B.id: online - smaller, G.id: smaller}


def test_resize_of_a_container_not_started_yet_is_answered_at_once() -> None:
    e = make_core()
    e.run(BPOD, B)
    e.handle(create(GPOD, G))
    out = e.handle(resize(GPOD, G, 4000))
    assert isinstance(out.reply, UpdatesReply)
    assert len(CPUSet.parse(updates_of(out.reply)[G.id].cpus)) == 4
    # its start waits for a pass that saw the new CPUs
    token = park_token(e.handle(ev.StartContainer(G.id)).reply)
    e.write()
    assert token in e.resolves


def test_refused_resize_fails_the_update_and_changes_nothing() -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    mine = e.run(GPOD, G)
    node = e.core.node
    state, intent = node.state, node.containers[G.id].intent

    out = e.handle(resize(GPOD, G, 24_000))  # twice the node
    assert isinstance(out.reply, Refusal) and out.reply.kind == "resize"
    assert str(mine) in out.reply.message  # "the container keeps CPUs ..."
    assert node.state == state and node.containers[G.id].intent == intent
    assert node.desired(node.containers[G.id])[0] == mine and e.pool == online - mine
    assert not any(isinstance(x, WriteCheckpoint) for x in out.effects)
    # the kubelet wrote the pod cgroup's quota before it called (doPodResizeAction): only that is redone, by
    # a pass without a cpuset in it, at once and once more a second later (core/quotas.py)
    assert {name.partition("#")[0] for name, _ in timers(out) if not name.startswith("wait:")} <= {
        "settle", "settle-widen", RESIZE_TIMER}
    e.settle()
    assert [(p.items, [q.pod_key for q in p.quotas]) for p in e.history[-2:]] == [((), [GPOD.uid])] * 2
