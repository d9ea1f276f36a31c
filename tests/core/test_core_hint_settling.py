"""A decision's hint summaries leave the reply path (formatted lazily) but are not kept unformatted:
the core hands them to the edge to format once the node thread is idle (`SettleWhenIdle`)."""

from __future__ import annotations

from core_harness import container, create, make_core, make_settings, of_type, pod

from nri_pinner.core.effects import Refusal, SettleWhenIdle
from nri_pinner.engine.topologymanager.explain import HintSummaries


def test_each_admission_hands_its_unformatted_summaries_to_the_edge_once() -> None:
    e = make_core(make_settings(topology_manager={"policy": "best-effort"}))
    gold = pod("gold")
    out = e.handle(create(gold, container(gold, "app", 2000, 2000)))
    settles = of_type(out.effects, SettleWhenIdle)
    assert len(settles) == 1 and len(settles[0].summaries) == 1
    summary = settles[0].summaries[0]
    assert isinstance(summary, HintSummaries) and not summary.settled  # nothing formatted for the reply
    tracked = next(iter(e.core.node.containers.values()))
    assert tracked.hints["provider_hints"] is summary  # what status shows is the same object
    settles[0].settle()  # the edge, when idle
    assert summary.settled and summary["cpu"]["cpu"].startswith("{")
    # the next event hands nothing again
    later = pod("silver")
    out = e.handle(create(later, container(later, "app", 500, 1000)))  # shared pool: no hints to settle
    assert of_type(out.effects, SettleWhenIdle) == []


def test_a_rejection_is_settled_too() -> None:
    e = make_core(make_settings(topology_manager={"policy": "single-numa-node"}, nri={"on_reject": "fail"}))
    big = pod("big")
    out = e.handle(create(big, container(big, "app", 8000, 8000)))  # 8 CPUs: more than one node holds
    assert isinstance(out.reply, Refusal)
    settles = of_type(out.effects, SettleWhenIdle)
    assert [len(s.summaries) for s in settles] == [1]
    assert not settles[0].summaries[0].settled
