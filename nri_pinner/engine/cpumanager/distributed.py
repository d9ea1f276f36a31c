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

Speed (16 NUMA nodes, hundreds of CPUs: C(16, k) combinations, each with up to 2^k remainder
subsets): a combination whose balance floor (``_balance_floor``, cached per multiset of free
counts) is no better than the best so far is skipped, since only a strictly better one replaces
it; the search walks plain tuples and the Go aliasing is replayed once, for the winner. Equal
free counts are searched by multiset (``distributed_classes``), mostly distinct ones through a
bound over whole blocks of combinations (``distributed_search``), and a combination's remainder
subsets by their first members and bounds (``distributed_remainder``): the same pick, far fewer
scored. Each node's share is packed by ``packed_mask``, whose sort orders are trivial when the
free CPUs lie in one node.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator

from ..errors import InsufficientCPUs
from .distributed_classes import active_combinations, class_floors, rank, unrank
from .distributed_remainder import best_remainder, go_round3, stddev
from .distributed_search import least_first
from .index import TopologyIndex
from .packed import Accumulator, packed_mask


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


def _replayed_combination(items: list[int], k: int, position: int, seen: int) -> tuple[int, ...]:
    """What the kubelet's remembered combination number ``position`` holds once its loop has
    generated ``seen`` combinations (later ones overwrite the shared array), by replaying the
    loop (the reference ``_aliased_combination`` is checked against)."""
    chosen: _GoSlice | None = None
    for i, view in enumerate(_go_combinations(items, k)):
        if i == position:
            chosen = view
        if i + 1 >= seen:
            break
    assert chosen is not None
    return chosen.values()


def _aliased_combination(items: list[int], k: int, position: int, seen: int) -> tuple[int, ...]:
    """``_replayed_combination`` without the replay (C(16, 7) slices otherwise). The view's backing
    array was allocated by the append at index a, the last length below k where Go's capacity
    (0, 1, 2, 4, 8, ...) ran out; indexes above a are written in place by every later combination
    sharing its first a + 1 items. So it holds the last of those generated: the block's last one,
    or combination ``seen - 1`` when the loop stopped inside the block."""
    m = len(items)
    a = 0 if k == 1 else 1 << ((k - 1).bit_length() - 1)
    combo = unrank(m, k, position)
    block_last = combo[: a + 1] + list(range(m - (k - a - 1), m))
    last = block_last if rank(m, block_last) <= seen - 1 else unrank(m, k, seen - 1)
    return tuple(items[i] for i in last)


Plan = tuple[tuple[int, ...], tuple[int, ...]]  # (NUMA nodes, remainder NUMA nodes)


def _balance_floor(combo: tuple[int, ...], free_per_numa: dict[int, int], numas: list[int], n: int,
                   group: int, distribution: int, remainder: int) -> float:
    """A score no remainder subset of ``combo`` can beat (so the combination can be skipped when
    it is no better than the best so far; the kubelet keeps only a strictly better one).

    Every subset leaves the same total free (so the same mean); relaxing "round-robin over a
    subset" to "any groups on any nodes of the combination", the least squared spread takes each
    group from the currently fullest node (the sum is separable and convex). The float sum is
    lowered by a margin far above its rounding error, and sqrt / rounding are monotone, so the
    result never exceeds what ``stddev`` returns for any subset."""
    mean = go_round3((sum(free_per_numa[x] for x in numas) - n) / len(numas))
    inside = set(combo)
    spread = sum((free_per_numa[x] - mean) ** 2 for x in numas if x not in inside)
    left = [-(free_per_numa[x] - distribution) for x in combo]  # max-heap of what each node keeps
    heapq.heapify(left)
    for _ in range(remainder // group):
        heapq.heapreplace(left, left[0] + group)
    spread += sum((-v - mean) ** 2 for v in left)
    return go_round3(math.sqrt(spread * (1 - 1e-9) / len(numas)))


def _combo_floor(combo: tuple[int, ...], free_per_numa: dict[int, int], numas: list[int], n: int,
                 group: int) -> float | None:
    """None if the combination cannot hold N (the kubelet's checks), else a score no remainder
    subset of it can beat (see ``_balance_floor``). Both depend only on the
    free counts inside and outside the combination, so callers cache them by that multiset."""
    if sum(free_per_numa[x] for x in combo) < n:
        return None
    if sum(free_per_numa[x] // group for x in combo) * group < n:
        return None
    distribution = (n // len(combo) // group) * group
    if any(free_per_numa[x] < distribution for x in combo):
        return None
    remainder = n - distribution * len(combo)
    return _balance_floor(combo, free_per_numa, numas, n, group, distribution, remainder)


_UNSET = -1.0  # no cached floor yet (floors are >= 0)


def _best_for_combo(
    combo: tuple[int, ...], free_per_numa: dict[int, int], numas: list[int], n: int, group: int,
    bound: float = math.inf, floors: dict[tuple[int, ...], float | None] | None = None,
) -> tuple[float, tuple[int, ...] | None, tuple[int, ...]] | None:
    """(balance score, remainder subset as the kubelet holds it, remainder subset as scored)
    of one NUMA combination, or None if it cannot hold N or cannot score below ``bound``."""
    if floors is None:
        floor = _combo_floor(combo, free_per_numa, numas, n, group)
    else:
        key = tuple(sorted([free_per_numa[x] for x in combo]))
        floor = floors.get(key, _UNSET)
        if floor == _UNSET:
            floor = floors[key] = _combo_floor(combo, free_per_numa, numas, n, group)
    if floor is None or floor >= bound:
        return None
    distribution = (n // len(combo) // group) * group
    remainder = n - distribution * len(combo)
    after = {x: free_per_numa[x] for x in numas}
    for x in combo:
        after[x] -= distribution
    if remainder == 0:
        return stddev([after[x] for x in numas]), None, ()
    candidates = [x for x in combo if after[x] >= group]
    best, (k, position), best_subset = best_remainder(candidates, after, numas, remainder, group, floor)
    if not best_subset:
        return best, None, best_subset
    # what the kubelet's slice holds once every k-subset was generated (Go aliasing, replayed once)
    return best, _aliased_combination(candidates, k, position, math.comb(len(candidates), k)), best_subset


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

    floors: dict[tuple[int, ...], float | None] = {}
    by_size = sorted(free_per_numa.values(), reverse=True)
    by_groups = sorted((v // group for v in free_per_numa.values()), reverse=True)
    for k in range(min_numas, max_numas + 1):
        distribution = (n // k // group) * group
        if sum(by_size[:k]) < n or sum(by_groups[:k]) * group < n or by_size[k - 1] < distribution:
            continue  # no k nodes pass the kubelet's checks (_combo_floor's): every combination fails
        def floor_of(combo: tuple[int, ...]) -> float | None:
            key = tuple(sorted([free_per_numa[x] for x in combo]))
            found = floors.get(key, _UNSET)
            if found == _UNSET:
                found = floors[key] = _combo_floor(combo, free_per_numa, numas, n, group)
            return found

        classes = class_floors(numas, free_per_numa, k, floor_of)
        least = None if classes is None else min((f for _, f in classes), default=math.inf)
        best_balance = math.inf
        best: tuple[int, tuple[int, ...] | None, Plan] | None = None
        total = math.comb(len(numas), k)
        seen = total  # combinations the kubelet's loop generates (it checks for a perfect score after each)
        if classes is None:  # counts mostly distinct: score by floor, best floors first
            found = least_first(numas, k, free_per_numa, distribution, n, group, floor_of,
                                lambda c: _best_for_combo(c, free_per_numa, numas, n, group, math.inf, floors))
            if found is None:
                continue
            position, score, rest_view, scored_plan = found
            best = (position, rest_view, scored_plan)
            if score == 0:  # the kubelet stops at the next combination
                seen = min(position + 2, total)
            classes = []  # the walk below has nothing left to do
        # iterateCombinations order, less the combinations whose floor cannot beat the best so far
        # the lambda reads best_balance late on purpose: the walk prunes by the best so far
        for at, combo in active_combinations(numas, k, free_per_numa, classes, distribution,
                                             lambda: best_balance):  # noqa: B023
            if least is not None and least >= best_balance:  # nothing left can score strictly better
                break
            scored = _best_for_combo(combo, free_per_numa, numas, n, group, best_balance, floors)
            if scored is not None and scored[0] < best_balance:
                best_balance = scored[0]
                best = (rank(len(numas), at), scored[1], (combo, scored[2]))
            if best_balance == 0:  # the kubelet stops at the next combination
                seen = min(rank(len(numas), at) + 2, total)
                break
        if best is None:
            continue
        position, rest_view, scored_plan = best
        aliased: Plan = (_aliased_combination(numas, k, position, seen), rest_view or ())
        if _carry_out(idx, acc, aliased, n, group, spread) or _carry_out(idx, acc, scored_plan, n, group, spread):
            return acc.result
        raise InsufficientCPUs(n, free.bit_count(), "accounting error, not enough CPUs allocated")
    return packed_mask(idx, free, n, spread, False)
