"""Drift repair at the core (core/repairs.py): the core names the cgroups to read, those of started
containers only (a container between its create and its start is never a drift, whatever its cgroup
reads: runc is still making it); a drifted container is rewritten by a pass (the reply waits for it
and says "cgroup", or "runtime" when the write failed); with cgroup writes off it goes through the
runtime at once, and a repair the runtime could not send leaves the container to the next reply."""

from __future__ import annotations

import pytest
from core_harness import (
    Edge,
    container,
    cpus_of,
    create,
    make_core,
    mems_for,
    park_token,
    pod,
    updates_of,
)

from nri_pinner.core import events as ev
from nri_pinner.core.repairs import Drift, DriftProbe
from nri_pinner.engine.cpuset import EMPTY, CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CpusetUpdate

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


def probed(e: Edge) -> list[str]:
    """The ids of the containers a drift check reads."""
    reply: object = e.handle(ev.DriftCheck()).reply
    assert isinstance(reply, list)
    assert all(isinstance(p, DriftProbe) and p.cgroups_path for p in reply), reply
    return sorted(p.container_id for p in reply)


def test_drift_check_probes_every_started_container_with_a_cgroup() -> None:
    e = make_core()
    e.run(BPOD, B)
    e.run(GPOD, G)
    e.run(G2POD, G2)
    e.handle(ev.StopContainer(G2.id))  # exited: nothing to repair
    e.handle(create(XPOD, X))  # created, not started: runc may be making its cgroup right now
    reply = e.handle(ev.DriftCheck()).reply
    assert isinstance(reply, list)
    assert sorted(reply, key=lambda p: p.container_id) == [
        DriftProbe(c.id, c.name, c.linux.cgroups_path) for c in sorted((B, G), key=lambda c: c.id)]
    e.handle(ev.StartContainer(X.id))
    assert probed(e) == sorted((B.id, G.id, X.id))


def test_drifted_started_container_is_rewritten_by_a_pass_and_answered_after_it() -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    mine = e.run(GPOD, G)
    pool = online - mine
    e.history.clear()

    e.handle(ev.DriftCheck())  # the probe, then the read (the passes above were over before it)
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


@pytest.mark.parametrize("cgroup_writes", [True, False], ids=["writes", "no-writes"])
@pytest.mark.parametrize("read", [EMPTY, WRONG], ids=["empty", "wrong"])
def test_a_container_created_but_not_started_is_no_drift_whatever_its_cgroup_reads(
        cgroup_writes: bool, read: CPUSet) -> None:
    # issue 45: a systemd scope runc has made but not written yet reads "" (cgroup v2: inherit); the
    # container was sent a CRI update while it was being created, and a warning was logged
    e = make_core(cgroup_writes=cgroup_writes)
    gold = cpus_of(e.handle(create(GPOD, G)).reply)
    e.handle(create(XPOD, X))
    out = e.handle(ev.CpusetsRead({G.id: read, X.id: read}))  # read between the probe and the start
    assert out.reply == [] and out.effects == []
    assert e.in_flight == [] and e.resolves == {}
    assert e.core.node.told[G.id][0] == gold  # what the create answered still stands: nothing to resend


def test_a_started_container_with_an_empty_cpuset_is_repaired() -> None:
    # started, an empty cgroup-v2 cpuset.cpus inherits its parent's CPUs (the exclusive ones too): drift
    e = make_core()
    pool = e.topology.online - e.run(GPOD, G)
    mine = e.run(BPOD, B)
    assert mine == pool
    token = park_token(e.handle(ev.CpusetsRead({B.id: EMPTY})).reply)
    e.settle()
    assert [(i.container_id, i.cpus) for i in e.history[-1].items] == [(B.id, pool)]
    assert drifts(e.resolves[token]) == [(B.id, EMPTY, pool, "cgroup")]


def test_a_started_container_with_an_empty_cpuset_is_repaired_through_the_runtime_without_writes() -> None:
    e = make_core(cgroup_writes=False)
    e.run(BPOD, B)
    out = e.handle(ev.CpusetsRead({B.id: EMPTY}))
    assert drifts(out.reply) == [(B.id, EMPTY, e.topology.online, "runtime")]


def test_containers_from_synchronize_are_checked_once_running() -> None:
    # a restart between a create and its start: Synchronize lists that container CREATED (containerd
    # lists it so until its task has started); checked from its StartContainer on. A RUNNING one (its
    # start came while the plugin was away) is checked at once.
    before = make_core()
    before.handle(create(XPOD, X))
    before.run(BPOD, B)
    e = make_core(prior=before.body(), synchronized=False)
    created = container(XPOD, "app", cpus=str(e.topology.online), state=api.CONTAINER_CREATED)
    running = container(BPOD, "app", 500, 1000, cpus=str(e.topology.online))
    e.sync([XPOD, BPOD], [created, running], {running.linux.cgroups_path: (e.topology.online, (0, 1))})
    assert probed(e) == [B.id]
    assert e.handle(ev.CpusetsRead({X.id: EMPTY})).reply == []
    e.handle(ev.StartContainer(X.id))
    e.settle()
    assert probed(e) == sorted((B.id, X.id))
    token = park_token(e.handle(ev.CpusetsRead({X.id: EMPTY})).reply)  # started: a real drift now
    e.settle()
    assert drifts(e.resolves[token]) == [(X.id, EMPTY, e.pool, "cgroup")]


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
    e.handle(ev.DriftCheck())
    token = park_token(e.handle(ev.CpusetsRead({B.id: WRONG})).reply)
    e.handle(ev.StopContainer(B.id))  # before the settle fires
    e.settle()
    for name in [n for n in e.armed if n.startswith("wait:")]:
        e.fire(name)
    assert token in e.resolves
    assert drifts(e.resolves[token]) == [(B.id, WRONG, e.pool, "gone")]
