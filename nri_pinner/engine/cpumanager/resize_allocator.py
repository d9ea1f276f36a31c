"""Resize-aware takeByTopology: grow or shrink a CPU set while keeping the CPUs it must keep.

Follows the kubelet's resize allocator (``takeByTopologyNUMAPackedForResize`` and its
``cpuAccumulatorForResize``, KEP-5554): the retained CPUs are taken first, every sort order
puts the groups (NUMA node, socket, uncore cache, core) that already hold retained CPUs
before the others (each part ascending by free CPUs, then id, as the kubelet sorts), and a
group counts as "whole" when its CPUs are all either retained or free, so completing a
half-held core or NUMA node is a whole-group step. Steps: whole first level (NUMA nodes or
sockets), whole second level, optionally uncore caches, whole cores (not when spreading),
then single threads.

The NUMA-distributed variant is our own, simpler rule (the kubelet's distributed resize is
still in review): the final set is split as evenly as it can be over the fewest NUMA nodes
that include every node already holding retained CPUs, then packed per node.
"""

from __future__ import annotations

import math
from itertools import combinations

from ..cpuset import CPUSet
from ..errors import InsufficientCPUs
from ..topology.model import Topology
from .index import TopologyIndex, index_for


class _ResizeAccumulator:
    __slots__ = ("free", "idx", "needed", "result")

    def __init__(self, idx: TopologyIndex, free: int, retained: int, n: int) -> None:
        self.idx = idx
        self.result = retained
        self.free = free & ~retained
        self.needed = n - retained.bit_count()

    def take(self, mask: int) -> None:
        self.result |= mask
        self.free &= ~mask
        self.needed -= mask.bit_count()

    def done(self) -> bool:
        return self.needed < 1

    def whole(self, mask: int) -> bool:
        return mask & ~(self.result | self.free) == 0

    # -- sort orders: groups holding retained CPUs first, each part by (free count, id) ------------
    def _order(self, ids: list[int] | tuple[int, ...], masks: dict[int, int], within: int = -1) -> list[int]:
        held: list[tuple[int, int]] = []
        rest: list[tuple[int, int]] = []
        for i in ids:
            m = masks[i] & within
            avail = m & self.free
            if avail:
                (held if m & self.result else rest).append((avail.bit_count(), i))
        held.sort()
        rest.sort()
        return [i for _, i in held] + [i for _, i in rest]

    def _nested(self, outer: list[int], inner: dict[int, list[int]], outer_masks: dict[int, int],
                inner_masks: dict[int, int]) -> list[int]:
        out: list[int] = []
        seen: set[int] = set()
        for o in outer:
            for i in self._order(inner.get(o, []), inner_masks, outer_masks[o]):
                if i not in seen:
                    seen.add(i)
                    out.append(i)
        return out

    def numas(self) -> list[int]:
        idx = self.idx
        if idx.numa_first:
            return self._order(idx.numa_ids, idx.numa_mask)
        return self._nested(self.sockets(), idx.numas_in_socket, idx.socket_mask, idx.numa_mask)

    def sockets(self) -> list[int]:
        idx = self.idx
        if idx.numa_first:
            return self._nested(self.numas(), idx.sockets_in_numa, idx.numa_mask, idx.socket_mask)
        return self._order(idx.socket_ids, idx.socket_mask)

    def cores(self) -> list[int]:
        idx = self.idx
        if idx.numa_first:
            return self._nested(self.sockets(), idx.cores_in_socket, idx.socket_mask, idx.core_mask)
        return self._nested(self.numas(), idx.cores_in_numa, idx.numa_mask, idx.core_mask)

    def uncores(self) -> list[int]:
        idx = self.idx
        return self._nested(self.numas(), idx.uncores_in_numa, idx.numa_mask, idx.uncore_mask)

    # -- steps -------------------------------------------------------------------------------------
    def take_whole(self, ids: list[int], masks: dict[int, int]) -> None:
        for i in ids:
            if self.whole(masks[i]):
                avail = masks[i] & self.free
                if avail and self.needed >= avail.bit_count():
                    self.take(avail)

    def take_level(self, numa_level: bool) -> None:
        if numa_level:
            self.take_whole(self.numas(), self.idx.numa_mask)
        else:
            self.take_whole(self.sockets(), self.idx.socket_mask)

    def take_partial_uncore(self, uncore: int) -> None:
        idx = self.idx
        per_core = idx.cpus_per_core
        cores = idx.cores_in_uncore.get(uncore, [])
        if per_core > 1:  # first complete the cores this container already holds in the cache
            for c in cores:
                m = idx.core_mask[c]
                avail = m & self.free
                if not (m & self.result and avail) or not self.whole(m):
                    continue
                if self.needed < avail.bit_count():
                    break
                self.take(avail)
        cores_needed = (self.needed + per_core - 1) // per_core
        in_uncore = idx.uncore_mask[uncore] & self.free
        mask = 0
        for c in [c for c in cores if idx.core_mask[c] & in_uncore][:cores_needed]:
            mask |= idx.core_mask[c] & self.free
        if self.needed % 2 and per_core > 1 and mask.bit_count() > self.needed:
            mask &= ~(1 << (mask.bit_length() - 1))
        if mask and mask.bit_count() == self.needed:
            self.take(mask)

    def take_uncores(self) -> None:
        self.take_whole(self.uncores(), self.idx.uncore_mask)
        for u in self.uncores():
            if self.done():
                return
            self.take_partial_uncore(u)

    def take_remaining(self, spread: bool) -> None:
        idx = self.idx
        groups, masks = (self.sockets(), idx.socket_mask) if spread else (self.cores(), idx.core_mask)
        for g in groups:
            m = masks[g] & self.free
            while m and self.needed > 0:
                low = m & -m
                self.take(low)
                m ^= low
            if self.needed <= 0:
                return


def _packed(idx: TopologyIndex, free: int, retained: int, n: int, spread: bool, uncore: bool) -> int:
    acc = _ResizeAccumulator(idx, free, retained, n)
    if acc.done():
        return acc.result
    if acc.needed > acc.free.bit_count():
        raise InsufficientCPUs(n, (free | retained).bit_count())
    acc.take_level(idx.numa_first)
    if not acc.done():
        acc.take_level(not idx.numa_first)
    if not acc.done() and uncore:
        acc.take_uncores()
    if not acc.done() and not spread:
        acc.take_whole(acc.cores(), idx.core_mask)
    if not acc.done():
        acc.take_remaining(spread)
    if not acc.done():
        raise InsufficientCPUs(n, (free | retained).bit_count(), "failed to allocate cpus")
    return acc.result


def _stddev(values: list[int]) -> float:
    mean = sum(values) / len(values)
    return round(math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)), 3)


def _split(n: int, group: int, combo: tuple[int, ...], kept: dict[int, int], free: dict[int, int]
           ) -> dict[int, int] | None:
    """Per-node totals for ``combo`` summing to ``n`` in groups, as even as possible; None if infeasible."""
    base = (n // len(combo) // group) * group
    target = {x: max(base, kept[x]) for x in combo}
    if any(target[x] % group and target[x] != kept[x] for x in combo):
        return None
    left = n - sum(target.values())
    while left > 0:  # hand out groups to the node with the most room left
        room = [(free[x] + kept[x] - target[x], -x) for x in combo if free[x] + kept[x] - target[x] >= group]
        if not room:
            return None
        _, neg = max(room)
        target[-neg] += group
        left -= group
    if left < 0 or any(target[x] - kept[x] > free[x] for x in combo):
        return None
    return target


def _distributed(idx: TopologyIndex, free: int, retained: int, n: int, group: int, spread: bool) -> int:
    if n % group or n <= retained.bit_count():
        return _packed(idx, free, retained, n, spread, False)
    free &= ~retained
    kept = {x: (idx.numa_mask[x] & retained).bit_count() for x in idx.numa_ids}
    avail = {x: (idx.numa_mask[x] & free).bit_count() for x in idx.numa_ids}
    held = tuple(x for x in idx.numa_ids if kept[x])
    others = [x for x in idx.numa_ids if not kept[x] and avail[x]]
    for k in range(max(1, len(held)), len(held) + len(others) + 1):
        best: tuple[float, dict[int, int]] | None = None
        for extra in combinations(others, k - len(held)):
            target = _split(n, group, held + extra, kept, avail)
            if target is None:
                continue
            after = [avail[x] - (target.get(x, 0) - kept[x] if x in target else 0) for x in idx.numa_ids]
            score = _stddev(after)
            if best is None or score < best[0]:
                best = (score, target)
        if best is not None:
            result = retained
            for x, total in sorted(best[1].items()):
                node = idx.numa_mask[x]
                result |= _packed(idx, free & node, retained & node, total, spread, False)
            return result
    return _packed(idx, free, retained, n, spread, False)


def take_by_topology_for_resize(
    topology: Topology,
    available: CPUSet,
    retained: CPUSet,
    n: int,
    *,
    distribute_cpus_across_numa: bool = False,
    distribute_cpus_across_cores: bool = False,
    prefer_align_by_uncore_cache: bool = False,
    cpu_group_size: int = 1,
) -> CPUSet:
    """N CPUs that include every ``retained`` CPU, the rest chosen from ``available`` next to them.

    Grow: ``retained`` is the container's current set, ``available`` the free CPUs. Shrink:
    ``retained`` is its admitted baseline, ``available`` the CPUs it added since. Raises
    ``InsufficientCPUs`` when ``available`` cannot supply the difference and ``ValueError``
    when more CPUs are retained than requested or CPUs are not online.
    """
    idx = index_for(topology)
    unknown = (available | retained).mask & ~idx.all_mask
    if unknown:
        raise ValueError(f"CPUs {CPUSet.from_mask(unknown)} are not online CPUs of this topology")
    if n < len(retained):
        raise ValueError(f"cannot keep {len(retained)} CPUs ({retained}) in a set of {n}")
    free = available.mask & ~retained.mask
    if n - len(retained) > free.bit_count():
        raise InsufficientCPUs(n, len(available | retained))
    if distribute_cpus_across_numa:
        mask = _distributed(idx, free, retained.mask, n, cpu_group_size, distribute_cpus_across_cores)
    else:
        mask = _packed(idx, free, retained.mask, n, distribute_cpus_across_cores, prefer_align_by_uncore_cache)
    return CPUSet.from_mask(mask)
