"""Listing an implicit hint list (what ``status`` shows and the kubelet would walk) gives exactly the
kubelet's list: every mask in IterateBitMasks order (size, then node combination order) that
``is_hint`` accepts. The listings skip sizes below the narrowest hint and cut combination branches
that skipped a required node or cannot reach the threshold; this checks them against the plain walk."""

from __future__ import annotations

import contextlib
import itertools
import random

import pytest

from nri_pinner.engine.memorymanager.policy import MemoryAllocationError, NodeCapacity, StaticMemoryPolicy
from nri_pinner.engine.memorymanager.state import MEMORY, MemoryState
from nri_pinner.engine.topologymanager.cpu_hints import CPUTopologyHints
from nri_pinner.engine.topologymanager.hints import TopologyHint, mask_of

GB = 1 << 30


def plain_walk(hints: CPUTopologyHints) -> list[TopologyHint]:
    out = []
    for size in range(1, len(hints.nodes) + 1):
        for combo in itertools.combinations(hints.nodes, size):
            mask = mask_of(combo)
            if hints.is_hint(mask):
                out.append(TopologyHint(mask, hints.is_preferred(mask)))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_cpu_hint_listing_is_the_plain_walk(seed: int) -> None:
    rng = random.Random(f"listing-{seed}")
    for _ in range(150):
        nodes = sorted(rng.sample(range(10), rng.randint(1, 8)))
        weights = {n: rng.choice([0, 0, 1, 2, 4, 8]) for n in nodes}
        required = mask_of(n for n in nodes if rng.random() < 0.15)
        hints = CPUTopologyHints(node_weights=weights, required=required, threshold=rng.randint(-1, 20),
                                 min_affinity=rng.randint(1, len(nodes)), node_sockets={n: 0 for n in nodes},
                                 min_sockets=None)
        assert list(hints) == plain_walk(hints), hints


@pytest.mark.parametrize("seed", range(3))
def test_memory_hint_listing_is_the_plain_walk(seed: int) -> None:
    rng = random.Random(f"memory-listing-{seed}")
    for _ in range(60):
        nodes = list(range(rng.randint(1, 6)))
        policy = StaticMemoryPolicy([NodeCapacity(n, rng.choice([2, 4, 6]) * GB) for n in nodes])
        state = MemoryState()
        for k in range(rng.randint(0, 3)):
            hint = TopologyHint(mask_of(rng.sample(nodes, rng.randint(1, len(nodes)))), False)
            with contextlib.suppress(MemoryAllocationError):
                state = policy.allocate(state, f"p{k}", "c", {MEMORY: rng.randint(1, 8) * GB}, hint)
        got = policy.hints(state, "new", "c", {MEMORY: rng.randint(1, 10) * GB})
        assert got is not None
        hints = got[MEMORY]
        assert isinstance(hints, CPUTopologyHints)
        assert list(hints) == plain_walk(hints)
