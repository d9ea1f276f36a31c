"""The packed core of takeByTopology (the kubelet's ``takeByTopologyNUMAPacked``) on bitmasks.

``Accumulator`` holds the free mask, the result and the CPUs still needed, and knows the
kubelet's sort orders; ``packed_mask`` runs its steps: whole NUMA nodes / sockets, whole uncore
caches (optional), whole cores, then single threads. Both the public allocators
(``allocator``) and the NUMA-distributed one (``distributed``) build on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..errors import InsufficientCPUs
from .index import TopologyIndex


class Accumulator:
    """Free mask, result mask and CPUs still needed, plus the kubelet's sort orders."""

    __slots__ = ("free", "idx", "needed", "result")

    def __init__(self, idx: TopologyIndex, free: int, needed: int) -> None:
        self.idx = idx
        self.free = free
        self.result = 0
        self.needed = needed

    def take(self, mask: int) -> None:
        self.result |= mask
        self.free &= ~mask
        self.needed -= mask.bit_count()

    def satisfied(self) -> bool:
        return self.needed < 1

    # -- sort orders (ascending free count, then id; only groups with free CPUs) ---------
    def _by_free(self, ids: Iterable[int], masks: dict[int, int], within: int = -1) -> list[int]:
        free = self.free
        keyed = []
        for i in ids:
            m = masks[i]
            if m & free & within:
                keyed.append(((m & free).bit_count(), i))
        keyed.sort()
        return [i for _, i in keyed]

    def _nested(
        self,
        outer: list[int],
        inner: dict[int, list[int]],
        outer_masks: dict[int, int],
        inner_masks: dict[int, int],
    ) -> list[int]:
        out: list[int] = []
        seen: set[int] = set()
        for o in outer:
            for i in self._by_free(inner.get(o, ()), inner_masks, outer_masks[o]):
                if i not in seen:
                    seen.add(i)
                    out.append(i)
        return out

    def sorted_numas(self) -> list[int]:
        idx = self.idx
        if idx.numa_first:
            return self._by_free(idx.numa_ids, idx.numa_mask)
        return self._nested(self.sorted_sockets(), idx.numas_in_socket, idx.socket_mask, idx.numa_mask)

    def sorted_sockets(self) -> list[int]:
        idx = self.idx
        if idx.numa_first:
            return self._nested(self.sorted_numas(), idx.sockets_in_numa, idx.numa_mask, idx.socket_mask)
        return self._by_free(idx.socket_ids, idx.socket_mask)

    def sorted_cores(self) -> list[int]:
        idx = self.idx
        if idx.numa_first:
            return self._nested(self.sorted_sockets(), idx.cores_in_socket, idx.socket_mask, idx.core_mask)
        return self._nested(self.sorted_numas(), idx.cores_in_numa, idx.numa_mask, idx.core_mask)

    def sorted_uncores(self) -> list[int]:
        idx = self.idx
        return self._nested(self.sorted_numas(), idx.uncores_in_numa, idx.numa_mask, idx.uncore_mask)

    # -- taking whole groups -----------------------------------------------------------
    def _take_whole(self, ids: list[int], masks: dict[int, int], free_size: Callable[[int], int]) -> None:
        # The candidate list is fixed before the first take, as in the kubelet.
        candidates = [i for i in ids if (masks[i] & self.free).bit_count() == free_size(i)]
        for i in candidates:
            mask = masks[i]
            if self.needed >= mask.bit_count():
                self.take(mask & self.free)

    def take_full_numa_nodes(self) -> None:
        masks = self.idx.numa_mask
        self._take_whole(self.sorted_numas(), masks, lambda n: masks[n].bit_count())

    def take_full_sockets(self) -> None:
        per_socket = self.idx.cpus_per_socket
        self._take_whole(self.sorted_sockets(), self.idx.socket_mask, lambda _s: per_socket)

    def take_full_uncores(self) -> None:
        masks = self.idx.uncore_mask
        self._take_whole(self.sorted_uncores(), masks, lambda u: masks[u].bit_count())

    def take_full_cores(self) -> None:
        per_core = self.idx.cpus_per_core
        self._take_whole(self.sorted_cores(), self.idx.core_mask, lambda _c: per_core)

    def take_first_level(self) -> None:
        if self.idx.numa_first:
            self.take_full_numa_nodes()
        else:
            self.take_full_sockets()

    def take_second_level(self) -> None:
        if self.idx.numa_first:
            self.take_full_sockets()
        else:
            self.take_full_numa_nodes()

    # -- uncore caches (prefer-align-cpus-by-uncorecache) ----------------------------------
    def take_partial_uncore(self, uncore: int) -> None:
        """The kubelet's takePartialUncore: the lowest-id ``needed // threads`` cores with a
        free CPU in the cache, taken only if their free CPUs are exactly what is still needed
        (so an odd remainder on SMT is left to the whole-core and single-thread steps)."""
        idx = self.idx
        cores_needed = self.needed // idx.cpus_per_core
        in_uncore = idx.uncore_mask[uncore] & self.free
        cores = [c for c in idx.cores_in_uncore.get(uncore, ()) if idx.core_mask[c] & in_uncore][
            :cores_needed
        ]
        mask = 0
        for c in cores:
            mask |= idx.core_mask[c] & self.free
        if mask.bit_count() == self.needed:
            self.take(mask)

    def take_uncore_caches(self) -> None:
        per_uncore = self.idx.cpus_per_uncore
        for uncore in self.sorted_uncores():
            if self.needed >= per_uncore:
                self.take_full_uncores()
            if self.satisfied():
                return
            self.take_partial_uncore(uncore)
            if self.satisfied():
                return

    # -- single threads -------------------------------------------------------------------
    def take_remaining(self, spread: bool) -> None:
        """Take threads in the kubelet's order: by core (packed) or by socket (spread)."""
        idx = self.idx
        groups, masks = (
            (self.sorted_sockets(), idx.socket_mask) if spread else (self.sorted_cores(), idx.core_mask)
        )
        free = self.free
        for g in groups:
            m = masks[g] & free
            while m and self.needed > 0:
                low = m & -m
                self.take(low)
                m ^= low
            if self.needed <= 0:
                return


def packed_mask(idx: TopologyIndex, free: int, n: int, spread: bool, uncore: bool) -> int:
    acc = Accumulator(idx, free, n)
    if acc.satisfied():
        return 0
    acc.take_first_level()
    if acc.satisfied():
        return acc.result
    acc.take_second_level()
    if acc.satisfied():
        return acc.result
    if uncore:
        acc.take_uncore_caches()
        if acc.satisfied():
            return acc.result
    if not spread:
        acc.take_full_cores()
        if acc.satisfied():
            return acc.result
    acc.take_remaining(spread)
    if acc.satisfied():
        return acc.result
    raise InsufficientCPUs(n, free.bit_count(), "failed to allocate cpus")
