"""The Memory Manager's default and extended hint (``getDefaultHint``) found without walking the list:
``MemoryHints.best_holding`` against the kubelet's loop over every hint, on random hint lists."""

from __future__ import annotations

import random

import pytest

from nri_pinner.engine.memorymanager.hints import MemoryHints
from nri_pinner.engine.topologymanager.hints import TopologyHint, is_narrower_than


def kubelet_pick(hints: MemoryHints, within: int) -> TopologyHint | None:
    """The kubelet's loop: keep a preferred hint over a non-preferred one, else the narrower."""
    best: TopologyHint | None = None
    for h in hints:
        assert h.affinity is not None
        if h.affinity & within != within:
            continue
        if best is None or (h.preferred and not best.preferred) or (
                h.preferred == best.preferred and is_narrower_than(h.affinity, best.affinity or 0)):
            best = h
    return best


def random_hints(rng: random.Random) -> MemoryHints:
    count = rng.randint(1, 9)
    nodes = list(range(count))
    pool = sum(1 << n for n in nodes if rng.random() < 0.7)
    used = [n for n in nodes if not pool >> n & 1]
    kinds = ["memory"] + (["hugepages-2Mi"] if rng.random() < 0.5 else [])
    free = {k: {n: rng.choice([0, 1, 2, 4, 8]) for n in nodes if pool >> n & 1} for k in kinds}
    requests = {k: rng.randint(1, 12) for k in kinds}
    extras: set[int] = set()
    for _ in range(rng.randint(0, 3)):
        if used:
            extras.add(sum(1 << n for n in rng.sample(used, rng.randint(1, len(used)))))
    return MemoryHints(nodes, pool, free, requests, frozenset(extras), rng.randint(1, count))


@pytest.mark.parametrize("seed", range(40))
def test_best_holding_is_the_kubelets_pick(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        hints = random_hints(rng)
        for within in {0, *(rng.randrange(1 << len(hints.nodes)) for _ in range(3)),
                       *(h.affinity or 0 for h in list(hints)[:2])}:
            assert hints.best_holding(within) == kubelet_pick(hints, within), (hints, within)
