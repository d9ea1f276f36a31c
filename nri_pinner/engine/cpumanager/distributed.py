"""distribute-cpus-across-numa (the kubelet's ``takeByTopologyNUMADistributed``, KEP-2902).

Tries 1, 2, 3, ... NUMA nodes (from the smallest count that can hold the request),
splits the request evenly in groups of ``cpu_group_size``, hands leftover groups to the
subset of nodes that keeps the per-node free counts most balanced (standard deviation,
rounded to 3 decimals like the kubelet), and packs within each node. Combination order
and tie-breaks match the kubelet's, so the same node set is chosen.
"""

from __future__ import annotations

import math
from itertools import combinations

from ..errors import InsufficientCPUs
from .index import TopologyIndex
from .packed import Accumulator, packed_mask


def _go_round3(x: float) -> float:
    # Go's math.Round (half away from zero); the inputs here are never negative.
    return math.floor(x * 1000 + 0.5) / 1000


def _stddev(values: list[int]) -> float:
    mean = _go_round3(sum(values) / len(values))
    var = sum((v - mean) * (v - mean) for v in values) / len(values)
    return _go_round3(math.sqrt(var))


def _spread_remainder(after: dict[int, int], subset: tuple[int, ...], remainder: int, group: int) -> bool:
    """Hand out ``remainder`` CPUs in groups round-robin over ``subset``; False if it cannot finish."""
    while remainder > 0:
        progressed = False
        for numa in subset:
            if remainder == 0:
                break
            if after[numa] < group:
                continue
            after[numa] -= group
            remainder -= group
            progressed = True
        if not progressed:  # the kubelet would loop forever here; treat the subset as unusable
            return False
    return True


def _best_for_combo(
    combo: tuple[int, ...], free_per_numa: dict[int, int], numas: list[int], n: int, group: int
) -> tuple[float, tuple[int, ...] | None] | None:
    """(balance score, remainder subset) of one NUMA combination, or None if it cannot hold N."""
    if sum(free_per_numa[x] for x in combo) < n:
        return None
    if sum(free_per_numa[x] // group for x in combo) * group < n:
        return None
    distribution = (n // len(combo) // group) * group
    if any(free_per_numa[x] < distribution for x in combo):
        return None
    after = {x: free_per_numa[x] for x in numas}
    for x in combo:
        after[x] -= distribution
    remainder = n - distribution * len(combo)
    if remainder == 0:
        return _stddev([after[x] for x in numas]), None
    candidates = [x for x in combo if after[x] >= group]
    best = math.inf
    best_subset: tuple[int, ...] | None = None
    for k in range(len(candidates), 0, -1):
        for subset in combinations(candidates, k):
            if sum(after[x] for x in subset) < remainder:
                continue
            trial = dict(after)
            if not _spread_remainder(trial, subset, remainder, group):
                continue
            balance = _stddev([trial[x] for x in numas])
            if balance < best:
                best, best_subset = balance, subset
    return best, best_subset


def distributed_mask(idx: TopologyIndex, free: int, n: int, group: int, spread: bool) -> int:
    if n % group:
        return packed_mask(idx, free, n, spread, False)
    acc = Accumulator(idx, free, n)
    if acc.satisfied():
        return 0
    numas = acc.sorted_numas()
    free_per_numa = {x: (idx.numa_mask[x] & free).bit_count() for x in numas}

    # Range of NUMA counts worth trying (kubelet's rangeNUMANodesNeededToSatisfy).
    total_cpus = idx.all_mask.bit_count()
    groups_per_numa = (((total_cpus - 1) // group + 1) - 1) // len(idx.numa_ids) + 1
    groups_needed = (n - 1) // group + 1
    min_numas = (groups_needed - 1) // groups_per_numa + 1
    max_numas = min(groups_needed, len(numas))

    for k in range(min_numas, max_numas + 1):
        best_balance = math.inf
        best_combo: tuple[int, ...] | None = None
        best_remainder: tuple[int, ...] | None = None
        for combo in combinations(numas, k):
            if best_balance == 0:
                break
            scored = _best_for_combo(combo, free_per_numa, numas, n, group)
            if scored is not None and scored[0] < best_balance:
                best_balance, best_remainder = scored
                best_combo = combo
        if best_combo is None:
            continue
        distribution = (n // len(best_combo) // group) * group
        for numa in best_combo:
            acc.take(packed_mask(idx, idx.numa_mask[numa] & acc.free, distribution, spread, False))
        remainder = n - distribution * len(best_combo)
        while remainder > 0:
            progressed = False
            for numa in best_remainder or ():
                if remainder == 0:
                    break
                in_numa = idx.numa_mask[numa] & acc.free
                if in_numa.bit_count() < group:
                    continue
                acc.take(packed_mask(idx, in_numa, group, spread, False))
                remainder -= group
                progressed = True
            if not progressed:
                break
        if acc.needed != 0:
            raise InsufficientCPUs(
                n, free.bit_count(), f"accounting error, not enough CPUs allocated, remaining: {acc.needed}"
            )
        return acc.result
    return packed_mask(idx, free, n, spread, False)
