"""The packed core of takeByTopology (the kubelet's ``takeByTopologyNUMAPacked``) on bitmasks.

``Accumulator`` holds the free mask, the result and the CPUs still needed, and knows the
kubelet's sort orders; ``packed_mask`` runs its steps: whole NUMA nodes / sockets, whole uncore
caches (optional), whole cores, then single threads. Both the public allocators
(``allocator``) and the NUMA-distributed one (``distributed``) build on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

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
        owner: dict[int, int] | None = None,
    ) -> list[int]:
        out: list[int] = []
        seen: set[int] = set()
        for o in outer:
            ids: Sequence[int] = inner.get(o, ())
            # only the groups holding free CPUs get through _by_free: find them from few CPUs
            found = ids if owner is None else _owners(owner, self.free & outer_masks[o], ids)
            for i in self._by_free(found, inner_masks, outer_masks[o]):
                if i not in seen:
                    seen.add(i)
                    out.append(i)
        return out

    def _sole(self, group_of_cpu: dict[int, int], masks: dict[int, int]) -> list[int] | None:
        """[g] when every free CPU is in group g ([] when none is free): any sort order of that
        level is then just g. None otherwise. (A NUMA node's own allocation, distributed.py's.)"""
        free = self.free
        if not free:
            return []
        g = group_of_cpu.get((free & -free).bit_length() - 1)
        return [g] if g is not None and free & ~masks[g] == 0 else None

    def sorted_numas(self) -> list[int]:
        idx = self.idx
        sole = self._sole(idx.numa_of_cpu, idx.numa_mask)
        if sole is not None:
            return sole
        if idx.numa_first:
            return self._by_free(idx.numa_ids, idx.numa_mask)
        return self._nested(self.sorted_sockets(), idx.numas_in_socket, idx.socket_mask, idx.numa_mask)

    def sorted_sockets(self) -> list[int]:
        idx = self.idx
        sole = self._sole(idx.socket_of_cpu, idx.socket_mask)
        if sole is not None:
            return sole
        if idx.numa_first:
            return self._nested(self.sorted_numas(), idx.sockets_in_numa, idx.numa_mask, idx.socket_mask)
        return self._by_free(idx.socket_ids, idx.socket_mask)

    def sorted_cores(self) -> list[int]:
        idx = self.idx
        if idx.numa_first:
            return self._nested(self.sorted_sockets(), idx.cores_in_socket, idx.socket_mask, idx.core_mask,
                                idx.core_of_cpu)
        return self._nested(self.sorted_numas(), idx.cores_in_numa, idx.numa_mask, idx.core_mask, idx.core_of_cpu)

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
        # _take_whole(sorted_cores()) in one pass without the sort: the candidates (free count =
        # cpus_per_core) all sort alike, so they come by id within each outer group, as the inner
        # lists are kept; cores are disjoint, so taking one leaves the others' counts as listed.
        idx = self.idx
        per_core, masks, free, needed = idx.cpus_per_core, idx.core_mask, self.free, self.needed
        outer, inner = ((self.sorted_sockets(), idx.cores_in_socket) if idx.numa_first
                        else (self.sorted_numas(), idx.cores_in_numa))
        taken = 0
        if idx.regular_cores:  # a candidate is a wholly free core, and each takes per_core CPUs
            for o in outer:
                for i in inner[o]:
                    if needed < per_core:
                        break
                    mask = masks[i]
                    if mask & free == mask:
                        taken |= mask
                        needed -= per_core
        else:
            seen: set[int] = set()  # a core spanning outer groups counts in the first (as _nested)
            for o in outer:
                for i in inner.get(o, ()):
                    mask = masks[i]
                    if (mask & free).bit_count() == per_core and i not in seen:
                        seen.add(i)
                        if needed >= mask.bit_count():
                            taken |= mask & free
                            needed -= per_core
        self.take(taken)

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
    def take_partial_uncore(self, uncore: int, odd_smt: bool = True) -> None:
        """The kubelet's takePartialUncore: the lowest-id cores with a free CPU in the cache, taken
        only if their free CPUs are exactly what is still needed.

        ``odd_smt`` (kubelet 1.34+, kubernetes#131850): ``ceil(needed / threads)`` cores, less their
        highest CPU when an odd count on SMT leaves one over, so an odd count can fit a cache.
        Without it (v1.32): ``needed // threads`` cores, so on SMT an odd remainder never fits
        and is left to the whole-core and single-thread steps."""
        idx = self.idx
        per_core = idx.cpus_per_core
        cores_needed = -(-self.needed // per_core) if odd_smt else self.needed // per_core
        in_uncore = idx.uncore_mask[uncore] & self.free
        cores = [c for c in idx.cores_in_uncore.get(uncore, ()) if idx.core_mask[c] & in_uncore][
            :cores_needed
        ]
        mask = 0
        for c in cores:
            mask |= idx.core_mask[c] & self.free
        # the kubelet tests "odd" (% 2), not "not a multiple of the threads", and drops one CPU only
        if odd_smt and self.needed % 2 and per_core > 1 and mask.bit_count() > self.needed:
            mask &= ~(1 << (mask.bit_length() - 1))
        if mask.bit_count() == self.needed:
            self.take(mask)

    def take_uncore_caches(self, odd_smt: bool = True) -> None:
        per_uncore = self.idx.cpus_per_uncore
        for uncore in self.sorted_uncores():
            if self.needed >= per_uncore:
                self.take_full_uncores()
            if self.satisfied():
                return
            self.take_partial_uncore(uncore, odd_smt)
            if self.satisfied():
                return

    # -- single threads -------------------------------------------------------------------
    def _cores_lazily(self) -> Iterator[int]:
        """sorted_cores() one outer group at a time, for regular cores: a few threads seldom need
        every group sorted, and taking from one group changes no other group's order (no core
        spans two, so neither its free counts nor, on resize, what it holds)."""
        idx = self.idx
        outer, inner, masks = ((self.sorted_sockets(), idx.cores_in_socket, idx.socket_mask) if idx.numa_first
                               else (self.sorted_numas(), idx.cores_in_numa, idx.numa_mask))
        for o in outer:
            yield from self._by_free(_owners(idx.core_of_cpu, self.free & masks[o], inner[o]), idx.core_mask, masks[o])

    def take_remaining(self, spread: bool) -> None:
        """Take threads in the kubelet's order: by core (packed) or by socket (spread)."""
        idx = self.idx
        groups: Iterable[int]
        if spread:
            groups, masks = self.sorted_sockets(), idx.socket_mask
        elif idx.regular_cores:
            groups, masks = self._cores_lazily(), idx.core_mask
        else:
            groups, masks = self.sorted_cores(), idx.core_mask
        free = self.free
        for g in groups:
            m = masks[g] & free
            while m and self.needed > 0:
                low = m & -m
                self.take(low)
                m ^= low
            if self.needed <= 0:
                return


def _owners(owner: dict[int, int], cpus: int, ids: Sequence[int]) -> Iterable[int]:
    """The groups of ``ids`` holding a CPU of ``cpus``, found from the CPUs when they are few
    (``owner``: CPU -> group; the group of every CPU in ``cpus`` is one of ``ids``)."""
    if cpus.bit_count() * 2 >= len(ids):
        return ids
    found: set[int] = set()
    while cpus:
        low = cpus & -cpus
        found.add(owner[low.bit_length() - 1])
        cpus ^= low
    return found


def packed_mask(idx: TopologyIndex, free: int, n: int, spread: bool, uncore: bool, odd_smt_uncore: bool = True
                ) -> int:
    """``odd_smt_uncore``: the partial-uncore step of kubelet 1.34+ (see take_partial_uncore)."""
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
        acc.take_uncore_caches(odd_smt_uncore)
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
