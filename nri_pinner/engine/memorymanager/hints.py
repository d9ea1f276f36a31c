"""The Memory Manager's hint list, held implicitly (like CPU hints) so 16 NUMA nodes stay cheap.

The kubelet's list (``calculateHints``) is: every mask with enough allocatable *and* free
memory of each requested kind, minus masks the group rules forbid. With node states split
into *unused* nodes (no assignment: free = allocatable) and *used* ones, that list is exactly

* masks made only of unused nodes whose totals hold every request (an up-set inside the
  unused pool), plus
* a few explicit masks over used nodes: a used node alone when it holds single-NUMA
  allocations, and an existing multi-node group as a whole (each checked for free memory).

A mask mixing used and unused nodes, or a group's subset or superset, is never a hint.
Preferred = size equals the smallest mask with enough allocatable memory on any nodes.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property

from ..topologymanager.cpu_hints import CPUTopologyHints
from ..topologymanager.hints import TopologyHint, nodes_of
from ..topologymanager.implicit_merge import UpForm
from ..topologymanager.subsets import _subsets_ascending


class MemoryHints(CPUTopologyHints):
    def __init__(self, nodes: Sequence[int], pool: int, pool_free: Mapping[str, Mapping[int, int]],
                 requests: Mapping[str, int], extras: frozenset[int], min_affinity: int) -> None:
        super().__init__(node_weights={n: 0 for n in nodes}, required=0, threshold=0, min_affinity=min_affinity,
                         node_sockets={n: 0 for n in nodes}, min_sockets=None)
        self.pool = pool & self.universe
        self.extras = extras
        self._free = {r: dict(w) for r, w in pool_free.items()}
        self._need = dict(requests)

    @cached_property
    def up_form(self) -> UpForm:  # kept: a rejection's explanation merges again per provider
        """Pool masks with enough free memory (an up-set inside the pool) plus the used-node masks."""
        kinds = sorted(self._need)
        weights = {n: tuple(self._free[r].get(n, 0) for r in kinds) for n in nodes_of(self.pool)}
        return UpForm(self.pool, 0, weights, tuple(self._need[r] for r in kinds), self.extras)

    def _enough(self, mask: int) -> bool:
        if mask & (mask - 1) == 0:  # one node
            n = mask.bit_length() - 1
            return all(self._free[r].get(n, 0) >= need for r, need in self._need.items())
        bits = nodes_of(mask)
        return all(sum(self._free[r].get(n, 0) for n in bits) >= need for r, need in self._need.items())

    def is_hint(self, mask: int) -> bool:
        if mask in self.extras:
            return True
        return mask != 0 and mask & ~self.pool == 0 and self._enough(mask)

    def _find_narrowest(self) -> int | None:
        best = min((m.bit_count() for m in self.extras), default=None)
        pool_nodes = nodes_of(self.pool)
        start = max((_greedy([self._free[r].get(n, 0) for n in pool_nodes], need)
                     for r, need in self._need.items()), default=1)
        for size in range(max(start, 1), len(pool_nodes) + 1):
            if best is not None and size >= best:
                break
            if any(self._enough(sum(1 << n for n in c)) for c in itertools.combinations(pool_nodes, size)):
                best = size
                break
        return best

    def _hints_of_size(self, size: int) -> list[int]:
        return sorted(m for m in (sum(1 << n for n in c) for c in itertools.combinations(self.nodes, size))
                      if self.is_hint(m))

    def preferred_layers(self) -> Iterator[tuple[int, Iterator[int]]]:
        if self.narrowest_count is not None and self.min_affinity <= len(self.nodes):
            yield self.min_affinity, iter(self._hints_of_size(self.min_affinity))

    def masks_within(self, within: int, size: int) -> Iterator[int]:
        """Masks R ⊆ ``within`` of ``size`` nodes that are some hint's intersection with ``within``.

        Pool hints form an up-set inside the pool, so R ⊆ pool qualifies iff R ∪ (pool ∖ within)
        holds the request; the explicit used-node masks are intersected one by one.
        """
        found = {e & within for e in self.extras if (e & within).bit_count() == size}
        inside = nodes_of(within & self.pool)
        outside = self.pool & ~within
        if size <= len(inside):
            for combo in itertools.combinations(inside, size):
                r = sum(1 << n for n in combo)
                if self._enough(r | outside):
                    found.add(r)
        yield from sorted(found)

    def closest_within(self, within: int, size: int, distance: Mapping[int, Mapping[int, int]]) -> int | None:
        def key(m: int) -> tuple[int, int]:
            bits = nodes_of(m)
            return sum(distance[a][b] for a in bits for b in bits), m
        return min(self.masks_within(within, size), key=key, default=None)

    def best_holding(self, within: int) -> TopologyHint | None:
        """The kubelet's pick over this whole list (``getDefaultHint``, and the extended hint when
        ``within`` is set): preferred first, then the narrowest (fewest nodes, lowest mask), among
        hints holding every node of ``within``. The same answer as walking the list, found by
        asking size by size for the lowest such mask (16 NUMA nodes: 65,535 hints otherwise)."""
        if self.narrowest_count is None:
            return None
        preferred = self.min_affinity
        for size in [preferred, *(s for s in range(1, len(self.nodes) + 1) if s != preferred)]:
            mask = self._lowest_holding(within, size)
            if mask is not None:
                return TopologyHint(mask, size == preferred)
        return None

    def _lowest_holding(self, within: int, size: int) -> int | None:
        best = min((e for e in self.extras if e.bit_count() == size and e & within == within), default=None)
        if within & ~self.pool:
            return best  # pool hints hold pool nodes only
        rest = nodes_of(self.pool & ~within)
        slots = size - within.bit_count()
        if slots < 0 or slots > len(rest) or size == 0:
            return best
        # ascending masks whose first resource reaches its need; the others checked on each
        first = min(self._need)
        weights = [self._free[first].get(n, 0) for n in rest]
        need = self._need[first] - sum(self._free[first].get(n, 0) for n in nodes_of(within))
        for subset in _subsets_ascending(rest, weights, slots, need):
            mask = subset | within  # within is disjoint from rest: the order is kept
            if best is not None and mask > best:
                break
            if self._enough(mask):
                return mask
        return best

    def __iter__(self) -> Iterator[TopologyHint]:
        """The kubelet's list (by size, then node combination order), from the pool and the extras only."""
        pool_nodes = nodes_of(self.pool)
        needs = list(self._need.items())
        free = [(1 << n, [self._free[r].get(n, 0) for r, _ in needs]) for n in pool_nodes]

        def pool_masks(size: int) -> Iterator[int]:  # _enough, inlined, in combination order
            if len(needs) == 1:
                need = needs[0][1]
                for combo in itertools.combinations(free, size):
                    if sum(held[0] for _, held in combo) >= need:
                        yield sum(bit for bit, _ in combo)
                return
            for combo in itertools.combinations(free, size):
                if all(sum(held[i] for _, held in combo) >= need for i, (_, need) in enumerate(needs)):
                    yield sum(bit for bit, _ in combo)

        low = self.narrowest_count  # no hint is narrower
        if low is None:
            return
        for size in range(low, len(self.nodes) + 1):  # lazily: callers often want a few
            extras = sorted((m for m in self.extras if m.bit_count() == size), key=nodes_of)
            # pool and extras never share a mask (extras hold used nodes); both in node order
            masks = heapq.merge(pool_masks(size), extras, key=nodes_of) if extras else pool_masks(size)
            preferred = size == self.min_affinity  # memory hints: preferred by size alone
            for m in masks:
                yield TopologyHint(m, preferred)

    def __repr__(self) -> str:
        return f"MemoryHints(pool={self.pool:#x}, extras={sorted(self.extras)}, need={self._need})"


def _greedy(weights: list[int], need: int) -> int:
    """Fewest of ``weights`` (largest first) that reach ``need`` (a lower bound for joint checks)."""
    total = 0
    for i, w in enumerate(sorted(weights, reverse=True), 1):
        total += w
        if total >= need:
            return i
    return len(weights) + 1


def min_affinity(nodes: Sequence[int], alloc: Mapping[str, Mapping[int, int]], requests: Mapping[str, int]) -> int:
    """Smallest mask size whose allocatable memory holds every request (all nodes if none does)."""
    start = max((_greedy([alloc[r].get(n, 0) for n in nodes], need) for r, need in requests.items()), default=1)
    for size in range(max(start, 1), len(nodes) + 1):
        for combo in itertools.combinations(nodes, size):
            if all(sum(alloc[r].get(n, 0) for n in combo) >= need for r, need in requests.items()):
                return size
    return len(nodes)
