"""In-place resize outcomes at the core (README "Resize"): what the reply carries, in which order the
pass writes the cgroups (the no-window rule), what status, metrics and the checkpoint show, and a
refusal. (Were rule tests of tests/service/test_resize_service.py, through the whole stack on a
cgroup-v1 tree in tmp; the real writes' order, budgets, pod-level updates and device/memory intake
stay there.) Dual-socket fixture: 12 CPUs, core c = {c, c+6}, CPU 0 reserved."""

from __future__ import annotations

import pytest
from core_harness import Edge, container, make_core, pod, resize, updates_of

from nri_pinner.cli.status import render_status
from nri_pinner.core import events as ev
from nri_pinner.core.effects import Park, Refusal
from nri_pinner.engine.cpuset import CPUSet

BPOD, GPOD = pod("burst", "burstable"), pod("gold")
B = container(BPOD, "app", 100)
G = container(GPOD, "app", 2000, 2000)


def answer(e: Edge, event: ev.UpdateContainer) -> object:
    """The update's reply (a parked one once its pass is written)."""
    reply = e.handle(event).reply
    if isinstance(reply, Park):
        e.settle()
        return e.resolves[reply.token]
    return reply


def written(e: Edge) -> list[tuple[str, str]]:
    """Every cgroup write of the passes since the last look, in order: (container id, cpus)."""
    out = [(i.container_id, str(i.cpus)) for p in e.history for i in p.items]
    e.history.clear()
    return out


def count(e: Edge, outcome: str, reason: str = "") -> float:
    return e.metric("nri_pinner_resizes_total", {"outcome": outcome, "reason": reason})


def test_grow_keeps_every_cpu_and_shrink_narrows_the_container_before_the_pool() -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    baseline = e.run(GPOD, G)
    written(e)

    grown = CPUSet.parse(updates_of(answer(e, resize(GPOD, G, 4000)))[G.id].cpus)
    assert len(grown) == 4 and baseline.issubset(grown)
    assert written(e) == [(B.id, str(online - grown)), (G.id, str(grown))]  # the neighbour narrowed first
    entry = e.entries()[G.id]
    assert (entry["admitted"], entry["current"]) == (str(baseline), str(grown))

    reply = answer(e, resize(GPOD, G, 2000))
    assert updates_of(reply)[G.id].cpus == str(baseline)
    e.settle()
    assert written(e) == [(G.id, str(baseline)), (B.id, str(online - baseline))]  # the container narrowed first
    assert count(e, "grow") == 1 and count(e, "shrink") == 1


@pytest.mark.parametrize(("milli", "reason"), [(12000, "InsufficientCPUs"), (1000, "ResizeBelowBaseline")])
def test_a_refused_resize_fails_the_update_and_keeps_everything(milli: int, reason: str) -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    mine = e.run(GPOD, G)
    written(e)
    refusal = answer(e, resize(GPOD, G, milli))
    assert isinstance(refusal, Refusal) and refusal.kind == "resize"  # the stub fails the update with it
    assert f"resize of 'app' to {milli}m/{milli}m refused: {reason}" in refusal.message
    doc = e.assignments()[G.id]
    assert doc["cpus"] == str(mine) and doc["resize"]["outcome"] == "refused"
    assert doc["resize"]["reason"] == reason and doc["resize"]["after"] == str(mine)
    assert count(e, "refused", reason) == 1
    text = render_status(e.document())
    assert f"gold/app: refused {mine} -> {mine} (admitted {mine}, {milli}m/{milli}m) {reason}: " in text
    e.settle()
    assert e.cgroups[B.id] == online - mine and written(e) == []
    # the kubelet's retry with the old values is answered as usual
    assert updates_of(answer(e, resize(GPOD, G, 2000)))[G.id].cpus == str(mine)


def test_a_burstable_container_is_never_made_exclusive() -> None:
    e = make_core()
    online = e.topology.online
    e.run(BPOD, B)
    reply = answer(e, resize(BPOD, B, 2000))  # request = limit, still Burstable
    assert updates_of(reply)[B.id].cpus == str(online)
    assert e.assignments()[B.id]["exclusive"] is False and count(e, "shared") == 1


def test_admitted_and_current_sets_survive_a_restart() -> None:
    before = make_core()
    baseline = before.run(GPOD, G)
    grown = CPUSet.parse(updates_of(answer(before, resize(GPOD, G, 4000)))[G.id].cpus)
    assert before.cgroups[G.id] == grown
    # the runtime's record after the resize: the new quota/shares, the create's cpuset; the cgroup
    # holds the grown set
    g = container(GPOD, "app", 4000, 4000, cpus=str(baseline))
    e = make_core(prior=before.body(), synchronized=False)
    e.cgroups = dict(before.cgroups)
    reply = e.sync([GPOD], [g], {g.linux.cgroups_path: (grown, tuple(e.topology.numa_of(grown)))})
    assert updates_of(reply) == {}  # the cgroup already holds it: no cpuset to write
    # only the pod cgroup's quota is looked at again after a (re)connect (core/quotas.py)
    assert [(p.items, [q.pod_key for q in p.quotas]) for p in e.history] == [((), [GPOD.uid])]
    assert e.cgroups[G.id] == grown
    doc = e.assignments()[G.id]
    assert (doc["cpus"], doc["admitted"]) == (str(grown), str(baseline))
    # and the baseline still bounds a shrink after the restart
    refusal = answer(e, resize(GPOD, g, 1000))
    assert isinstance(refusal, Refusal) and "ResizeBelowBaseline" in refusal.message
    assert e.core.node.desired(e.core.node.containers[G.id]) == (grown, tuple(e.topology.numa_of(grown)))
