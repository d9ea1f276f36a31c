"""Device-rule hints held implicitly, and the merge's non-preferred search over them.

When every device a container has must be used (a pod's NICs), the kubelet device rule gives every
NUMA mask that holds all the devices' nodes S: 2^(N - |S|) hints, preferred only S itself — 32,768
on 16 nodes, which the merge would walk per provider. :class:`UpSetHints` keeps that list as
(S, universe); iterating it still yields the kubelet's list.

In the merge's non-preferred phase the reachable ANDs of explicit hints are kept as *intervals*
[lo, hi] = every X with lo ⊆ X ⊆ hi: an explicit mask m is [m, m], an up-set is [S, universe], and
the AND of two interval families is the family of pairwise [lo1 & lo2, hi1 & hi2] (X = (X ∪ lo1) &
(X ∪ lo2) shows every X in between is reached). With the CPU hints (an up-set family too) a mask R
is reachable through [lo, hi] iff R ⊆ hi and R ∪ (CPU universe ∖ lo) is a CPU hint: take X = lo ∪ R
(the smallest X ⊇ R) and C = R ∪ (universe ∖ lo), so C ∩ X = R, and a larger X only shrinks C.
Degenerate intervals go through the CPU hints' own searches, so merges without up-sets are unchanged.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

from .cpu_hints import CPUTopologyHints
from .hints import TopologyHint, masks_of_size, nodes_of

Interval = tuple[int, int]


class UpSetHints(Sequence[TopologyHint]):
    """Every mask ⊆ ``universe`` that contains ``required``; only ``required`` is preferred."""

    def __init__(self, universe: int, required: int) -> None:
        if required <= 0 or required & ~universe:
            raise ValueError(f"required nodes {required:#x} must be a non-empty subset of {universe:#x}")
        self.universe, self.required = universe, required
        self._free = nodes_of(universe & ~required)

    def __iter__(self) -> Iterator[TopologyHint]:
        yield TopologyHint(self.required, True)
        for size in range(1, len(self._free) + 1):
            for extra in itertools.combinations(self._free, size):
                yield TopologyHint(self.required | sum(1 << n for n in extra), False)

    def __len__(self) -> int:
        return 1 << len(self._free)

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, TopologyHint) or item.affinity is None:
            return False
        mask = item.affinity
        return mask & self.required == self.required and not mask & ~self.universe and (
            item.preferred == (mask == self.required))

    @overload
    def __getitem__(self, index: int) -> TopologyHint: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[TopologyHint]: ...
    def __getitem__(self, index: int | slice) -> TopologyHint | Sequence[TopologyHint]:
        return list(self)[index]  # not on any hot path: the merge never indexes

    def __eq__(self, other: object) -> bool:
        if isinstance(other, UpSetHints):
            return (self.universe, self.required) == (other.universe, other.required)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((UpSetHints, self.universe, self.required))

    def __repr__(self) -> str:
        return f"UpSetHints(universe={self.universe:#x}, required={self.required:#x})"


def fold(intervals: set[Interval], source: Sequence[TopologyHint], default: int) -> set[Interval]:
    """AND one explicit source (or an up-set) into the reachable intervals; empty ones are dropped."""
    if isinstance(source, UpSetHints):
        pieces = {(source.required, source.universe)}
    else:
        pieces = {(m, m) for m in {default if h.affinity is None else h.affinity for h in source}}
    return {(lo & plo, hi & phi) for lo, hi in intervals for plo, phi in pieces if hi & phi}


def _best_of(masks: Iterator[int], closest: bool, key: Callable[[int], Any]) -> int | None:
    if not closest:  # ascending masks: the first is the best
        return next(masks, None)
    return min(masks, key=key, default=None)


def best_within(lo: int, hi: int, size: int, family: CPUTopologyHints | None, order: Any) -> int | None:
    """The best mask of ``size`` nodes reachable through [lo, hi] (and the CPU hints, if any)."""
    if family is None:
        if lo == hi:
            return lo if lo and lo.bit_count() == size else None
        extra = masks_of_size(nodes_of(hi & ~lo), size - lo.bit_count())
        return _best_of((lo | e for e in extra if lo | e), order.closest, order.same_size_key)
    if lo == hi:
        if order.closest:
            return family.closest_within(lo, size, order.table)
        return next(family.masks_within(lo, size), None)
    outside = family.universe & ~lo
    masks = (r for r in masks_of_size(nodes_of(hi & family.universe), size) if family.is_hint(r | outside))
    return _best_of(masks, order.closest, order.same_size_key)


def best_non_preferred_in_intervals(intervals: set[Interval], family: CPUTopologyHints | None, order: Any,
                       best_count: int, largest: int) -> int | None:
    """The kubelet's best non-preferred merged mask over the reachable intervals."""
    for size in order.non_preferred_sizes(best_count, largest):
        found = [m for lo, hi in intervals if (m := best_within(lo, hi, size, family, order)) is not None]
        if found:
            return min(found, key=order.same_size_key)
    return None
