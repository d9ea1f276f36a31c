"""distribute-cpus-across-numa (the kubelet's ``takeByTopologyNUMADistributed``, KEP-2902).

Tries 1, 2, 3, ... NUMA nodes (from the smallest count that can hold the request),
splits the request evenly in groups of ``cpu_group_size``, hands leftover groups to the
subset of nodes that keeps the per-node free counts most balanced (standard deviation,
rounded to 3 decimals like the kubelet), and packs within each node. Combination order
and tie-breaks match the kubelet's, so the same node set is chosen.

The kubelet's ``iterateCombinations`` builds each combination with Go's ``append`` on a shared
prefix, so the combination it remembers as "best" is a view on an array that later
combinations overwrite: what it allocates from is what that array holds when the search
ends (topoDualSocketMultiNumaPerSocketHTLarge, 168 CPUs in pairs: NUMA 0-4 and 7, not 0-5).
``_go_combinations`` reproduces that aliasing exactly (Go grows a slice's capacity 0, 1, 2,
4, 8, ...). Where the aliased choice could not be carried out (the kubelet then fails with
an accounting error or loops forever), the best combination as scored is used instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

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


class _GoSlice:
    """A Go slice: a shared backing array and a length (read late, like the kubelet does)."""

    __slots__ = ("arr", "n")

    def __init__(self, arr: list[int], n: int) -> None:
        self.arr, self.n = arr, n

    def append(self, x: int) -> _GoSlice:
        if self.n < len(self.arr):  # room left: write in place, sharing the array
            self.arr[self.n] = x
            return _GoSlice(self.arr, self.n + 1)
        arr = self.arr[: self.n] + [0] * max(1, 2 * len(self.arr) - self.n)
        arr[self.n] = x
        return _GoSlice(arr, self.n + 1)

    def values(self) -> tuple[int, ...]:
        return tuple(self.arr[: self.n])


def _go_combinations(items: list[int], k: int) -> Iterator[_GoSlice]:
    """k-combinations in the kubelet's order, each a view aliased exactly as Go's append does."""
    if k < 1:
        return

    def helper(k: int, start: int, accum: _GoSlice) -> Iterator[_GoSlice]:
        if k == 0:
            yield accum
            return
        for i in range(start, len(items) - k + 1):
            yield from helper(k - 1, i + 1, accum.append(items[i]))

    yield from helper(k, 0, _GoSlice([], 0))


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


Plan = tuple[tuple[int, ...], tuple[int, ...]]  # (NUMA nodes, remainder NUMA nodes)


def _best_for_combo(
    combo: tuple[int, ...], free_per_numa: dict[int, int], numas: list[int], n: int, group: int
) -> tuple[float, _GoSlice | None, tuple[int, ...]] | None:
    """(balance score, remainder subset as the kubelet holds it, remainder subset as scored)
    of one NUMA combination, or None if it cannot hold N."""
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
        return _stddev([after[x] for x in numas]), None, ()
    candidates = [x for x in combo if after[x] >= group]
    best = math.inf
    best_view: _GoSlice | None = None
    best_subset: tuple[int, ...] = ()
    for k in range(len(candidates), 0, -1):
        for view in _go_combinations(candidates, k):
            subset = view.values()
            if sum(after[x] for x in subset) < remainder:
                continue
            trial = dict(after)
            if not _spread_remainder(trial, subset, remainder, group):
                continue
            balance = _stddev([trial[x] for x in numas])
            if balance < best:
                best, best_view, best_subset = balance, view, subset
    return best, best_view, best_subset


def _carry_out(idx: TopologyIndex, acc: Accumulator, plan: Plan, n: int, group: int, spread: bool) -> bool:
    """Allocate ``plan`` into ``acc``; False (acc untouched) where the kubelet would fail or hang."""
    combo, rest = plan
    distribution = (n // len(combo) // group) * group
    free, result, needed = acc.free, acc.result, acc.needed
    for numa in combo:
        in_numa = idx.numa_mask[numa] & acc.free
        if in_numa.bit_count() < distribution:
            break
        acc.take(packed_mask(idx, in_numa, distribution, spread, False))
    else:
        remainder = n - distribution * len(combo)
        while remainder > 0:
            progressed = False
            for numa in rest:
                in_numa = idx.numa_mask[numa] & acc.free
                if remainder == 0 or in_numa.bit_count() < group:
                    continue
                acc.take(packed_mask(idx, in_numa, group, spread, False))
                remainder -= group
                progressed = True
            if not progressed:
                break
        if acc.needed == 0:
            return True
    acc.free, acc.result, acc.needed = free, result, needed
    return False


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
        best: tuple[_GoSlice, _GoSlice | None, Plan] | None = None
        for view in _go_combinations(numas, k):
            if best_balance == 0:
                break
            combo = view.values()
            scored = _best_for_combo(combo, free_per_numa, numas, n, group)
            if scored is not None and scored[0] < best_balance:
                best_balance = scored[0]
                best = (view, scored[1], (combo, scored[2]))
        if best is None:
            continue
        combo_view, rest_view, scored_plan = best
        aliased: Plan = (combo_view.values(), rest_view.values() if rest_view else ())
        if _carry_out(idx, acc, aliased, n, group, spread) or _carry_out(idx, acc, scored_plan, n, group, spread):
            return acc.result
        raise InsufficientCPUs(n, free.bit_count(), "accounting error, not enough CPUs allocated")
    return packed_mask(idx, free, n, spread, False)
