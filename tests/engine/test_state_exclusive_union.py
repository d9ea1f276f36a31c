"""EngineState keeps the union of exclusive CPUs incrementally; it must always equal a full recount."""

from __future__ import annotations

import random

from nri_pinner.engine.cpumanager.state import Assignment, EngineState
from nri_pinner.engine.cpuset import EMPTY, CPUSet


def recount(state: EngineState) -> CPUSet:
    return EngineState(state.default_set, state.assignments, state.reusable).exclusive_cpus()


def test_the_carried_union_matches_a_recount_through_random_changes() -> None:
    rng = random.Random(19)
    state = EngineState(CPUSet(range(64)))
    state.exclusive_cpus()  # known from the start: every later state carries it
    carried = 0
    for _ in range(2000):
        key = (f"pod{rng.randrange(8)}", f"c{rng.randrange(4)}")
        if rng.random() < 0.3:
            state = state.with_changes(drop=key)
        else:
            exclusive = rng.random() < 0.6
            cpus = CPUSet(rng.sample(range(64), rng.randrange(1, 4))) if exclusive else EMPTY
            state = state.with_changes(put=Assignment(*key, cpus, cpus, exclusive))
        carried += state.exclusive_mask is not None
        assert state.exclusive_cpus() == recount(state)
    assert carried > 500  # most changes were carried, not recounted
