"""Drift repair at the core (core/repairs.py): the core names the cgroups to read; a drifted started
container is rewritten by a pass (the reply waits for it and says "cgroup", or "runtime" when the
write failed); anything else goes through the runtime at once, and a repair the runtime could not
send leaves the container to the next reply."""

from __future__ import annotations

from core_harness import (
    container,
    create,
    make_core,
    mems_for,
    park_token,
    pod,
    updates_of,
)

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.handlers import CpusetUpdate
from nri_pinner.service.core import events as ev
from nri_pinner.service.core.repairs import Drift, DriftProbe

BPOD, GPOD, G2POD, XPOD = pod("burst", "burstable"), pod("gold"), pod("gold2"), pod("extra", "besteffort")
B = container(BPOD, "app", 500, 1000)
G = container(GPOD, "app", 2000, 2000)
G2 = container(G2POD, "app", 2000, 2000)
X = container(XPOD, "app")
WRONG = CPUSet.parse("1-5")


def drifts(reply: object) -> list[tuple[str, CPUSet, CPUSet, str]]:
    """(container id, actual, desired, repair path) of each drift."""
    assert isinstance(reply, list), reply
    out = []
    for d, path in reply:
        assert isinstance(d, Drift)
        out.append((d.container_id, d.actual, d.desired, path))
    return out


def test_drift_check_probes_every_live_container_with_a_cgroup() -> None:
    e = make_core()
    e.run(BPOD, B)
    e.run(GPOD, G)
    e.run(G2POD, G2)
    e.handle(ev.StopContainer(G2.id))  # exited: nothing to repair
    e.handle(create(XPOD, X))
    reply = e.handle(ev.DriftCheck()).reply
    assert isinstance(reply, list)
    assert sorted(reply, key=lambda p: p.container_id) == [
        DriftProbe(c.id, c.name, c.linux.cgroups_path) for c in sorted((B, G, X), key=lambda c: c.id)]


def test_drifted_started_container_is_rewritten_by_a_pass_and_answered_after_it() -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    mine = e.run(GPOD, G)
    pool = online - mine
    e.history.clear()

    out = e.handle(ev.CpusetsRead({B.id: WRONG, G.id: mine}))  # G holds its set: no drift
    token = park_token(out.reply)
    e.settle()
    [p] = e.history
    assert [(i.container_id, i.cpus) for i in p.items] == [(B.id, pool)]
    assert drifts(e.resolves[token]) == [(B.id, WRONG, pool, "cgroup")]


def test_drift_whose_cgroup_write_fails_is_repaired_through_the_runtime() -> None:
    e = make_core()
    e.run(BPOD, B)
    token = park_token(e.handle(ev.CpusetsRead({B.id: WRONG})).reply)
    e.fire(next(name for name in e.armed if name.startswith("settle")))
    e.write(errors={B.id: "EBUSY"})
    assert drifts(e.resolves[token]) == [(B.id, WRONG, e.topology.online, "runtime")]


def test_drift_of_a_container_not_started_goes_through_the_runtime_at_once() -> None:
    e = make_core()
    e.handle(create(XPOD, X))
    out = e.handle(ev.CpusetsRead({X.id: WRONG}))
    assert drifts(out.reply) == [(X.id, WRONG, e.topology.online, "runtime")]
    assert e.in_flight == []


def test_drift_without_cgroup_writes_goes_through_the_runtime_at_once() -> None:
    e = make_core(cgroup_writes=False)
    e.run(BPOD, B)
    out = e.handle(ev.CpusetsRead({B.id: WRONG, "gone": WRONG}))  # a container no longer known: none
    assert drifts(out.reply) == [(B.id, WRONG, e.topology.online, "runtime")]
    assert e.in_flight == [] and e.history == []


def test_no_drift_no_repair() -> None:
    e = make_core()
    mine = e.run(GPOD, G)
    out = e.handle(ev.CpusetsRead({G.id: mine}))
    assert out.reply == [] and out.effects == []


def test_runtime_repair_not_sent_leaves_the_container_to_the_next_reply() -> None:
    e = make_core()
    e.run(BPOD, B)
    reply = e.handle(ev.CpusetsRead({B.id: WRONG})).reply
    park_token(reply)
    e.settle()
    generation = e.core.node.generation

    e.handle(ev.RuntimeRepaired(B.id, generation, sent=True))  # sent: nothing more to do
    assert updates_of(e.handle(create(XPOD, X)).reply) == {}
    e.handle(ev.RuntimeRepaired(B.id, e.core.node.generation, sent=False))
    assert e.core.node.via_reply == {B.id}
    reply = e.handle(create(XPOD, container(XPOD, "two"))).reply
    pool = e.topology.online
    assert updates_of(reply) == {B.id: CpusetUpdate(B.id, str(pool), mems_for(e.topology, pool), True)}


def test_drift_of_a_container_that_stops_before_its_pass_is_answered_gone() -> None:
    e = make_core()
    e.run(BPOD, B)
    e.run(GPOD, G)
    token = park_token(e.handle(ev.CpusetsRead({B.id: WRONG})).reply)
    e.handle(ev.StopContainer(B.id))  # before the settle fires
    e.settle()
    for name in [n for n in e.armed if n.startswith("wait:")]:
        e.fire(name)
    assert token in e.resolves
    assert drifts(e.resolves[token]) == [(B.id, WRONG, e.pool, "gone")]
