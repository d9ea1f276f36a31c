"""The remainder search of distribute-cpus-across-numa (cpumanager/distributed_remainder.py) scores
far fewer subsets than the kubelet's loop; it must still pick the very subset that loop keeps.

Checked against that loop written out (every subset of the candidates, largest first, each size in
combinations order, round-robin hand-out, the first strictly least score kept) on random free
counts: few and many leftover groups, nodes that run out mid-way, ties.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from nri_pinner.engine.cpumanager.distributed_remainder import Bound, Remainder, best_remainder, stddev


def kubelet_loop(candidates: list[int], after: dict[int, int], numas: list[int], remainder: int,
                 group: int) -> Remainder:
    best: Remainder = (math.inf, (0, 0), ())
    for k in range(len(candidates), 0, -1):
        for position, subset in enumerate(itertools.combinations(candidates, k)):
            if sum(after[x] for x in subset) < remainder:
                continue
            trial, left = dict(after), remainder
            while left > 0:
                moved = False
                for x in subset:
                    if left and trial[x] >= group:
                        trial[x] -= group
                        left -= group
                        moved = True
                if not moved:
                    break
            if left:
                continue  # the kubelet would loop forever; the port treats the subset as unusable
            balance = stddev([trial[x] for x in numas])
            if balance < best[0]:
                best = (balance, (k, position), subset)
    return best


@pytest.mark.parametrize("seed", range(8))
def test_remainder_search_matches_the_kubelet_loop(seed: int) -> None:
    rng = random.Random(f"remainder-{seed}")
    for _ in range(60):
        numas = list(range(rng.randint(2, 12)))
        group = rng.choice([1, 1, 2])
        spread = rng.choice([2, 6, 30])
        after = {x: rng.randint(0, spread) * rng.choice([1, group]) for x in numas}
        combo = sorted(rng.sample(numas, rng.randint(1, len(numas))))
        candidates = [x for x in combo if after[x] >= group]
        if not candidates:
            continue
        remainder = rng.randint(1, max(1, len(combo) - 1)) * group
        want = kubelet_loop(candidates, after, numas, remainder, group)
        # a floor of 0 never stops the search early; the combination's own floor is checked end to end
        got = best_remainder(candidates, after, numas, remainder, group, 0.0)
        assert got == want, (after, combo, remainder, group)


def test_cut_is_the_least_change_scoring_past_the_limit() -> None:
    """Bound.cut turns "this block's bound scores at or above the best" into one integer comparison;
    it must be exactly the first change whose score passes the limit."""
    rng = random.Random("cut")
    for _ in range(500):
        values = [rng.randint(0, rng.choice([8, 64, 300])) for _ in range(rng.randint(1, 16))]
        bound = Bound(values, rng.randint(0, sum(values)), rng.choice([1, 2]))
        limit = rng.choice([0.0, round(rng.uniform(0, 40), 3), bound.score(rng.randint(-bound.base, 10**8))])
        for ties in (True, False):
            cut = bound.cut(limit, ties)
            assert isinstance(cut, int)
            assert _passes(bound, cut, limit, ties), (values, limit, ties)
            assert cut == -bound.base or not _passes(bound, cut - 1, limit, ties), (values, limit, ties)
    assert Bound([1, 2], 1, 1).cut(math.inf, True) == math.inf


def _passes(bound: Bound, change: int, limit: float, ties: bool) -> bool:
    return bound.score(change) >= limit if ties else bound.score(change) > limit
