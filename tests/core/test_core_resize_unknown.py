"""Updates of containers the core does not know (README "Resize": containers Synchronize did not
list). (Were the rule tests of tests/service/test_resize_unknown.py, through the whole stack on a
cgroup-v1 tree in tmp; the over-budget one stays there.)

containerd 1.7 never synchronizes a pre-installed plugin, and a runtime whose CRI plugin has not
loaded every container yet leaves some out of Synchronize. containerd still relays their kubelet
updates, and runc applies containerd's stored spec -- with the create-time cpuset -- unless the reply
carries ours. The core adopts such a container by the rebuild rules (with what its cgroup holds,
which the edge reads for it), or at least answers with the shared pool."""

from __future__ import annotations

from core_harness import Edge, container, make_core, pod, resize, updates_of

from nri_pinner.core import events as ev
from nri_pinner.core.effects import Park, Refusal
from nri_pinner.core.resizing import adoptable
from nri_pinner.core.state import Told
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api

BPOD, GPOD = pod("burst", "burstable"), pod("gold")
B = container(BPOD, "app", 100)
G = container(GPOD, "app", 2000, 2000)


def held(e: Edge, c: api.Container) -> Told:
    """What ``c``'s cgroup holds, as the edge reads it."""
    cpus = e.cgroups[c.id]
    return cpus, tuple(e.topology.numa_of(cpus))


def update(e: Edge, event: ev.UpdateContainer) -> object:
    """The update with what the edge reads for it (an unknown adoptable container's cgroup, when it
    has one), answered: a parked reply once its pass is written."""
    req = event.req
    if req.container.id not in e.core.node.containers and adoptable(req) and req.container.id in e.cgroups:
        event = ev.UpdateContainer(req, event.extras, {req.container.linux.cgroups_path: held(e, req.container)})
    reply = e.handle(event).reply
    if isinstance(reply, Park):
        e.settle()
        return e.resolves[reply.token]
    return reply


def first_run(grow: bool = False) -> tuple[Edge, CPUSet, CPUSet]:
    """B (created first, on every CPU) and G (exclusive) running; G grown to 4 CPUs if asked.
    Returns (the core, G's baseline, G's current set); the checkpoint and cgroups hold them."""
    e = make_core()
    e.run(BPOD, B)
    baseline = current = e.run(GPOD, G)
    if grow:
        current = CPUSet.parse(updates_of(update(e, resize(GPOD, G, 4000)))[G.id].cpus)
    e.settle()
    assert e.cgroups[B.id] == e.topology.online - current
    return e, baseline, current


def restarted(before: Edge) -> Edge:
    """The next run's core, given the last one's checkpoint; the cgroups still hold what was written."""
    e = make_core(prior=before.body(), synchronized=False)
    e.cgroups = dict(before.cgroups)
    return e


def test_an_unlisted_shared_container_is_adopted_on_the_shared_pool() -> None:
    before, _, mine = first_run()
    online = before.topology.online
    e = restarted(before)
    # containerd restarted and its CRI plugin had not loaded the burstable pod: Synchronize lists G only
    g = container(GPOD, "app", 2000, 2000, cpus=str(mine))
    e.sync([GPOD], [g], {g.linux.cgroups_path: held(e, g)})
    assert B.id not in e.assignments()
    stale = container(BPOD, "app", 100, cpus=str(online))  # containerd's record: the create's cpuset
    reply = update(e, resize(BPOD, stale, 200, 0))
    assert updates_of(reply)[B.id].cpus == str(online - mine)  # not nothing, not its stale set
    doc = e.assignments()[B.id]
    assert doc["exclusive"] is False and doc["resize"]["outcome"] == "shared"
    assert e.metric("nri_pinner_resizes_total", {"outcome": "shared", "reason": ""}) == 1
    e.settle()
    assert e.cgroups[B.id] == online - mine


def test_an_unlisted_exclusive_container_keeps_its_checkpointed_sets() -> None:
    before, baseline, grown = first_run(grow=True)
    e = restarted(before)
    e.sync([], [])  # Synchronize lists nothing (the checkpoint's entries are dropped there)
    assert not e.core.node.state.exclusive_cpus()
    g = container(GPOD, "app", 4000, 4000, cpus=str(baseline))
    cpus = CPUSet.parse(updates_of(update(e, resize(GPOD, g, 6000)))[G.id].cpus)
    assert len(cpus) == 6 and grown.issubset(cpus)  # the grow kept what it ran on
    doc = e.assignments()[G.id]
    assert (doc["admitted"], doc["resize"]["outcome"]) == (str(baseline), "grow")
    refusal = update(e, resize(GPOD, g, 1000))
    assert isinstance(refusal, Refusal) and refusal.kind == "resize" and "ResizeBelowBaseline" in refusal.message
    assert e.entries()[G.id]["admitted"] == str(baseline)


def test_seeded_checkpoint_restores_both_sets_and_a_resize_right_after_it() -> None:
    """The pre-Synchronize seeding (containerd 1.7, pre-installed: no Synchronize at all)."""
    before, baseline, grown = first_run(grow=True)
    online = before.topology.online
    e = restarted(before)
    tr = e.core.node
    seeded = tr.state.get(GPOD.uid, "app")
    assert seeded is not None and seeded.exclusive
    assert (seeded.admitted, seeded.current) == (baseline, grown)
    assert not tr.containers and tr.shared_pool == online - grown
    # a new Guaranteed container never gets the held CPUs
    other = pod("other")
    assert e.run(other, container(other, "app", 2000, 2000)).isdisjoint(grown)
    # the kubelet resizes G right away: adopted with both sets, then grown from its current one
    g = container(GPOD, "app", 4000, 4000, cpus=str(baseline))
    cpus = CPUSet.parse(updates_of(update(e, resize(GPOD, g, 5000)))[G.id].cpus)
    assert len(cpus) == 5 and grown.issubset(cpus)
    assert G.id not in e.core.node.seeded
    a = tr.state.get(GPOD.uid, "app")
    assert a is not None and (a.admitted, a.current) == (baseline, cpus)
    # the shared container nobody listed: the shared pool, never its create-time set
    stale = container(BPOD, "app", 100, cpus=str(online))
    reply = update(e, resize(BPOD, stale, 100, 0))
    assert updates_of(reply)[B.id].cpus == str(tr.shared_pool)
    assert not CPUSet.parse(str(tr.shared_pool)) & tr.state.exclusive_cpus()


def test_an_update_that_cannot_be_adopted_gets_the_shared_pool() -> None:
    e = make_core()
    mine = e.run(GPOD, G)
    stray = container(BPOD, "app", 100, cpus=str(e.topology.online))
    event = resize(BPOD, stray, 200, 0)
    event.req.pod.CopyFrom(api.PodSandbox())  # no pod to place it in
    assert updates_of(update(e, event))[B.id].cpus == str(e.topology.online - mine)
    assert B.id not in e.assignments()
    stray.state = api.CONTAINER_STOPPED  # a stopped one needs no cpuset
    assert B.id not in updates_of(update(e, resize(BPOD, stray, 200, 0)))


def test_an_unknown_instance_of_a_known_name_is_not_adopted() -> None:
    """Its name's engine record belongs to the tracked instance: answered with the shared pool, and
    the tracked instance keeps its CPUs."""
    e = make_core()
    mine = e.run(GPOD, G)
    twin = container(GPOD, "app", 2000, 2000, cid="gold-app-old", cpus=str(mine))
    assert updates_of(update(e, resize(GPOD, twin, 2000)))[twin.id].cpus == str(e.topology.online - mine)
    assert twin.id not in e.assignments() and e.assignments()[G.id]["cpus"] == str(mine)
