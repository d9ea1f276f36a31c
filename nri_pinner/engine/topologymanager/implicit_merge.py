"""The merge's non-preferred search when several providers' hints are implicit (CPU + devices + memory).

Each implicit source is an *up-set form* (:class:`UpForm`): every X ⊆ U with X ⊇ q whose summed
per-node weights reach ``need`` in every dimension (CPU: free CPUs; device: free devices; memory:
free bytes per resource), plus a few explicit masks (the Memory Manager's used-node groups). The
explicit providers fold into intervals [lo, hi] (``upset_hints.fold``).

A mask R is reachable — some choice of one hint per provider ANDs to exactly R — iff for some
interval and some choice, per memory-like source, of an explicit mask e or its up-set:

* R ⊆ hi, R ⊆ every chosen e, R ⊆ U of every up-set source; and
* every node of D = (lo ∩ the chosen e's ∩ every up-set U) ∖ R is left out of some up-set source
  that does not require it, with every source still reaching ``need`` on what it keeps.

The interval's X is lo ∪ R (its smallest member holding R), and an up-set source keeps everything
it is not asked to drop: anything larger only removes options (weights are non-negative). Nodes
outside lo, an e or some U are dropped for free. Deciding D is a small assignment search (a node
with no weight in some source goes there at once), so the merge tests candidate masks in rank order
and stops at the first reachable one, instead of materialising every reachable AND: on 16 NUMA
nodes those sets reach thousands of masks per provider.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .hints import masks_of_size, nodes_of

Weights = tuple[int, ...]
Interval = tuple[int, int]  # as in upset_hints.py: every X with lo ⊆ X ⊆ hi


@dataclass(frozen=True)
class UpForm:
    """An implicit hint list: the up-set {X ⊆ universe : X ⊇ required, Σ weights ≥ need} ∪ extras."""

    universe: int
    required: int
    weights: dict[int, Weights]
    need: Weights
    extras: frozenset[int] = frozenset()


@dataclass
class _Up:
    universe: int
    required: int
    weights: dict[int, Weights]
    slack: list[int]  # total weight over the universe minus need, per dimension


def _up(form: UpForm) -> _Up | None:
    if form.required & ~form.universe:
        return None
    dims = len(form.need)
    totals = [0] * dims
    for n in nodes_of(form.universe):
        w = form.weights.get(n)
        if w is not None:
            for d in range(dims):
                totals[d] += w[d]
    slack = [totals[d] - form.need[d] for d in range(dims)]
    if any(s < 0 for s in slack):
        return None  # the up-set is empty: not even its whole universe holds the request
    return _Up(form.universe, form.required, form.weights, slack)


_Choice = tuple[int, int, list[_Up]]  # (mask every node must lie in, mask of nodes still to drop, up-sets)


def _choices(forms: Sequence[UpForm]) -> list[_Choice]:
    """Per source: its up-set or one of its extras; the product of those choices (extras are few)."""
    combos: list[_Choice] = [(-1, -1, [])]
    for form in forms:
        up = _up(form)
        options: list[tuple[int, _Up | None]] = [(e, None) for e in sorted(form.extras)]
        if up is not None:
            options.append((form.universe, up))
        combos = [(allowed & mask, fixed & (mask if up_ is None else -1), ups + ([up_] if up_ is not None else []))
                  for allowed, fixed, ups in combos for mask, up_ in options]
    return [(allowed, fixed & _universes(ups), ups) for allowed, fixed, ups in combos if allowed]


def _universes(ups: Sequence[_Up]) -> int:
    out = -1
    for up in ups:
        out &= up.universe
    return out


def _assign(nodes: list[int], ups: list[_Up]) -> bool:
    """Can every node be dropped by some up-set that does not require it, each keeping its need?"""
    if not nodes:
        return True
    hard: list[int] = []
    for n in nodes:  # a node weightless in some source costs nothing there
        bit = 1 << n
        if not any(not up.required & bit and not any(up.weights.get(n, ())) for up in ups):
            hard.append(n)
    if not hard:
        return True
    if not ups:
        return False
    failed: set[tuple[int, tuple[tuple[int, ...], ...]]] = set()

    def place(i: int) -> bool:
        if i == len(hard):
            return True
        key = (i, tuple(tuple(up.slack) for up in ups))
        if key in failed:
            return False
        n = hard[i]
        for up in ups:
            if up.required >> n & 1:
                continue
            w = up.weights.get(n, ())
            if any(w[d] > up.slack[d] for d in range(len(w))):
                continue
            for d in range(len(w)):
                up.slack[d] -= w[d]
            ok = place(i + 1)
            for d in range(len(w)):
                up.slack[d] += w[d]
            if ok:
                return True
        failed.add(key)
        return False

    return place(0)


def reachable(mask: int, intervals: Sequence[Interval], choices: Sequence[_Choice]) -> bool:
    for lo, hi in intervals:
        if mask & ~hi:
            continue
        for allowed, fixed, ups in choices:
            if mask & ~allowed:
                continue
            if _assign(nodes_of(lo & fixed & ~mask), ups):
                return True
    return False


def by_distance(pool: list[int], size: int, table: dict[int, dict[int, int]]) -> Iterator[int]:
    """``size``-subsets of ``pool`` in (summed distance, mask) order, lazily (the merge usually wants
    the first few of C(16, 8)). Best-first over partial choices, highest node first: a partial one is
    keyed by a lower bound of its completions' sums (the cheapest remaining nodes' exact cost against
    what is chosen, plus the least possible pairs among them) and by its lowest completion mask, so a
    complete mask leaves the heap only when nothing left in it can come before it."""
    n = len(pool)
    if not 1 <= size <= n:
        return
    pair = [[table[a][b] + table[b][a] for b in pool] for a in pool]
    min_pair = min((table[a][b] for a in pool for b in pool if a != b), default=0)
    lowest = [0] * (n + 1)  # lowest[r]: the mask of pool[:r]
    for i, x in enumerate(pool):
        lowest[i + 1] = lowest[i] | 1 << x
    # cost[j]: what pool[j] adds to the sum if taken next (itself, and its pairs with the chosen)
    cost = [table[x][x] for x in pool]
    heap: list[tuple[int, int, int, int, int, int, list[int]]] = [
        (sum(sorted(cost)[:size]) + size * (size - 1) * min_pair, lowest[size], 0, n, size, 0, cost)]
    count = 1
    while heap:
        _bound, low, _, limit, slots, total, cost = heapq.heappop(heap)
        if slots == 0:
            yield low
            continue
        rest = slots - 1
        mask = low & ~lowest[slots]  # the chosen nodes
        extra = rest * (rest - 1) * min_pair
        for i in range(rest, limit):
            row = pair[i]
            below = [cost[j] + row[j] for j in range(i)]
            sub = total + cost[i]
            floor = sum(sorted(below)[:rest]) if rest else 0
            heapq.heappush(heap, (sub + floor + extra, mask | 1 << pool[i] | lowest[rest], count, i, rest, sub, below))
            count += 1


def best_non_preferred_implicit(intervals: set[Interval], forms: Sequence[UpForm], order: Any,
                                best_count: int, largest: int) -> int | None:
    """The best-ranked reachable mask (``order``: the merge's ranking), None when nothing is reachable."""
    choices = _choices(forms)
    if not choices or not intervals:
        return None
    spans = sorted(intervals)
    allowed = 0
    for _lo, hi in spans:
        for mask, _, _ in choices:
            allowed |= hi & mask
    pool = nodes_of(allowed)
    for size in order.non_preferred_sizes(best_count, min(largest, len(pool))):
        candidates: Iterator[int] | list[int] = masks_of_size(pool, size)  # size >= 1 (non_preferred_sizes)
        if order.closest:  # (mean distance, mask): the same floats as order.same_size_key
            candidates = by_distance(pool, size, order.table)
        for mask in candidates:
            if reachable(mask, spans, choices):
                return mask
    return None
