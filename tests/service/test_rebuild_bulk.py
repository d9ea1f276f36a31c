"""Rebuild adds shared containers' records in bulk when no hint merge is involved: the state must
be the one admitting every container in order gives (the path a merging engine still takes)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from svc_harness import DUAL_SOCKET, container, make_settings, pod

from nri_pinner.core.intent import intent_from_nri
from nri_pinner.core.rebuild import rebuild
from nri_pinner.edge.app import build_engine
from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.cpumanager.state import Assignment, EngineState
from nri_pinner.engine.cpuset import EMPTY, CPUSet
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api

GOLD, BURST, BEST = pod("gold"), pod("burst", "burstable"), pod("best", "besteffort")


def engine_for(workdir: Path, **topology_manager: str) -> Engine:
    settings = make_settings(workdir, topology_manager=topology_manager)
    return build_engine(settings, discover(str(DUAL_SOCKET)))[0]


def node() -> list[api.Container]:
    """Shared and Guaranteed containers interleaved; one name used twice in a pod (a shared record
    the Guaranteed one must replace, as in order), an init container, a fractional Guaranteed one."""
    return [
        container(BURST, "a", 100, cid="c01"),
        container(GOLD, "g1", 2000, 2000, cid="c02"),
        container(BEST, "b", cid="c03"),
        container(GOLD, "half", 1500, 1500, cid="c04"),  # Guaranteed, fractional: shared pool
        container(GOLD, "g2", 1000, 1000, cid="c06"),
        container(GOLD, "g2", 1000, 1000, cid="c07"),  # the same name again: already admitted
        container(BURST, "init", 100, init=True, cid="c08"),
        container(BURST, "a", 100, cid="c09"),  # a second record under a shared name
        container(GOLD, "dup", 500, 500, cid="c10"),  # shared first ...
        container(GOLD, "dup", 1000, 1000, cid="c11"),  # ... then exclusive under the same name
    ]


def in_order(engine: Engine, containers: list[api.Container], pods: Mapping[str, api.PodSandbox]) -> EngineState:
    """The reference: every container admitted one by one, as the rebuild orders them (no prior)."""
    state = engine.initial_state()
    for c in sorted(containers, key=lambda c: c.id):
        i = intent_from_nri(pods[c.pod_sandbox_id], c)
        state, decision = engine.admit(state, AdmissionRequest(i.pod_key, i.container, i.qos, i.request_milli,
                                                               i.limit_milli, init=i.init))
        assert decision.admitted
    return engine.policy.start(state)[0]


def view(state: EngineState) -> dict[Any, Any]:
    return {k: (a.current, a.exclusive, a.init, a.restartable, a.numa_affinity) for k, a in state.assignments.items()}


@pytest.mark.parametrize("policy", ["none", "best-effort"])
def test_bulk_shared_records_give_the_state_of_admitting_in_order(workdir: Path, policy: str) -> None:
    engine = engine_for(workdir, policy=policy)
    assert engine.merges_shared is (policy != "none")
    containers = node()
    pods = {p.id: p for p in (GOLD, BURST, BEST)}
    got = rebuild(engine, {}, list(pods.values()), containers)
    want = in_order(engine, containers, pods)
    assert view(got.state) == view(want)
    assert got.state.default_set == want.default_set
    assert got.state.exclusive_cpus() == want.exclusive_cpus() and len(want.exclusive_cpus()) == 4
    assert not got.unreadable and set(got.containers) == {c.id for c in containers}


def test_with_shared_keeps_existing_records_and_refuses_exclusive_ones() -> None:
    held = Assignment("p", "x", CPUSet.parse("2"), CPUSet.parse("2"), exclusive=True)
    state = EngineState(default_set=CPUSet.parse("0-1,3")).hold(held)
    shared = Assignment("p", "x", EMPTY, EMPTY, exclusive=False)
    other = Assignment("p", "y", EMPTY, EMPTY, exclusive=False, init=True)
    out = state.with_shared({shared.key: shared, other.key: other})
    assert out.get("p", "x") == held and out.get("p", "y") == other
    assert out.exclusive_cpus() == CPUSet.parse("2") and state.get("p", "y") is None  # a copy
    with pytest.raises(ValueError, match="shared records only"):
        state.with_shared({held.key: held})
