"""Resize-aware takeByTopology: grow or shrink a CPU set while keeping the CPUs it must keep.

Follows the kubelet's resize allocator (``takeByTopologyNUMAPackedForResize`` and its
``cpuAccumulatorForResize``, KEP-5554): the retained CPUs are taken first, every sort order
puts the groups (NUMA node, socket, uncore cache, core) that already hold retained CPUs
before the others (each part ascending by free CPUs, then id, as the kubelet sorts), and a
group counts as "whole" when its CPUs are all either retained or free, so completing a
half-held core or NUMA node is a whole-group step. Steps: whole first level (NUMA nodes or
sockets), whole second level, optionally uncore caches, whole cores (not when spreading),
then single threads.

The NUMA-distributed variant follows the kubelet's ``takeByTopologyNUMADistributedForResize``
(still in review upstream, checked against its test cases): the final set is split as evenly as
it can be over the fewest NUMA nodes that include every node already holding retained CPUs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import combinations

from ..cpuset import CPUSet
from ..errors import InsufficientCPUs
from ..topology.model import Topology
from .index import TopologyIndex, index_for
from .packed import Accumulator


class _ResizeAccumulator(Accumulator):
    """The packed accumulator with the resize rules: retained CPUs are taken up front, a group is
    whole when its CPUs are retained or free, and every sort order puts held groups first."""

    __slots__ = ()

    def __init__(self, idx: TopologyIndex, free: int, retained: int, n: int) -> None:
        super().__init__(idx, free & ~retained, n - retained.bit_count())
        self.result = retained

    def whole(self, mask: int) -> bool:
        return mask & ~(self.result | self.free) == 0

    # -- sort orders: groups holding retained CPUs first, each part by (free count, id) ------------
    def _by_free(self, ids: Iterable[int], masks: dict[int, int], within: int = -1) -> list[int]:
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

    # -- steps -------------------------------------------------------------------------------------
    def take_whole(self, ids: list[int], masks: dict[int, int]) -> None:
        for i in ids:
            if self.whole(masks[i]):
                avail = masks[i] & self.free
                if avail and self.needed >= avail.bit_count():
                    self.take(avail)

    def take_level(self, numa_level: bool) -> None:
        if numa_level:
            self.take_whole(self.sorted_numas(), self.idx.numa_mask)
        else:
            self.take_whole(self.sorted_sockets(), self.idx.socket_mask)

    def take_partial_uncore(self, uncore: int, odd_smt: bool = True) -> None:
        # the upstream resize allocator is newer than kubernetes#131850 and always rounds up; odd_smt
        # False (the v1.32 rule, Accumulator.take_partial_uncore) is kept for the signature's sake
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
        cores_needed = (self.needed + per_core - 1) // per_core if odd_smt else self.needed // per_core
        in_uncore = idx.uncore_mask[uncore] & self.free
        mask = 0
        for c in [c for c in cores if idx.core_mask[c] & in_uncore][:cores_needed]:
            mask |= idx.core_mask[c] & self.free
        if odd_smt and self.needed % 2 and per_core > 1 and mask.bit_count() > self.needed:
            mask &= ~(1 << (mask.bit_length() - 1))
        if mask and mask.bit_count() == self.needed:
            self.take(mask)

    def take_uncores(self) -> None:
        self.take_whole(self.sorted_uncores(), self.idx.uncore_mask)
        for u in self.sorted_uncores():
            if self.satisfied():
                return
            self.take_partial_uncore(u)


def _packed(idx: TopologyIndex, free: int, retained: int, n: int, spread: bool, uncore: bool) -> int:
    acc = _ResizeAccumulator(idx, free, retained, n)
    if acc.satisfied():
        return acc.result
    if acc.needed > acc.free.bit_count():
        raise InsufficientCPUs(n, (free | retained).bit_count())
    acc.take_level(idx.numa_first)
    if not acc.satisfied():
        acc.take_level(not idx.numa_first)
    if not acc.satisfied() and uncore:
        acc.take_uncores()
    if not acc.satisfied() and not spread:
        acc.take_whole(acc.sorted_cores(), idx.core_mask)
    if not acc.satisfied():
        acc.take_remaining(spread)
    if not acc.satisfied():
        raise InsufficientCPUs(n, (free | retained).bit_count(), "failed to allocate cpus")
    return acc.result


def _round3(x: float) -> float:
    return math.floor(x * 1000 + 0.5) / 1000  # Go's math.Round on non-negative values


def _stddev(values: list[int]) -> float:
    mean = _round3(sum(values) / len(values))
    return _round3(math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)))


def _round_robin(after: dict[int, int], subset: tuple[int, ...], remainder: int, group: int) -> bool:
    while remainder > 0:
        progressed = False
        for x in subset:
            if remainder == 0:
                break
            if after[x] >= group:
                after[x] -= group
                remainder -= group
                progressed = True
        if not progressed:
            return False
    return True


def _score(combo: tuple[int, ...], order: list[int], avail: dict[int, int], kept: dict[int, int], n: int,
           group: int) -> tuple[float, tuple[int, ...]] | None:
    """(balance, remainder subset) of a NUMA combination, or None when it cannot hold the request."""
    distribution = (n // len(combo) // group) * group
    after = dict(avail)
    for x in combo:
        after[x] -= max(distribution, kept[x]) - kept[x]
        if after[x] < 0:
            return None
    remainder = n - sum(max(distribution, kept[x]) for x in combo)
    if remainder < 0:
        return None
    if remainder == 0:
        return _stddev([after[x] for x in order]), ()
    candidates = [x for x in combo if after[x] >= group]
    best: tuple[float, tuple[int, ...]] | None = None
    for k in range(len(candidates), 0, -1):
        for subset in combinations(candidates, k):
            if sum(after[x] for x in subset) < remainder:
                continue
            trial = dict(after)
            if not _round_robin(trial, subset, remainder, group):
                continue
            balance = _stddev([trial[x] for x in order])
            if best is None or balance < best[0]:
                best = (balance, subset)
    return best


def _distributed(idx: TopologyIndex, free: int, retained: int, n: int, group: int, spread: bool) -> int:
    """Even split over the fewest NUMA nodes that include every node holding retained CPUs.

    Combinations are tried in the resize sort order (held nodes first), scored by the balance of
    the free CPUs left, as the kubelet scores them; each node first gets ``max(distribution, kept)``
    CPUs, then the remainder goes round-robin in groups, one packed take per group.
    """
    if n % group or n <= retained.bit_count():
        return _packed(idx, free, retained, n, spread, False)
    free &= ~retained
    order = _ResizeAccumulator(idx, free, retained, n).sorted_numas()
    held = [x for x in idx.numa_ids if idx.numa_mask[x] & retained]
    order = [x for x in held if x not in order] + order
    kept = {x: (idx.numa_mask[x] & retained).bit_count() for x in idx.numa_ids}
    avail = {x: (idx.numa_mask[x] & free).bit_count() for x in idx.numa_ids}
    groups_per_numa = (((idx.all_mask.bit_count() - 1) // group + 1) - 1) // len(idx.numa_ids) + 1
    min_numas = max(len(held), ((n - 1) // group) // groups_per_numa + 1)
    for k in range(min_numas, min((n - 1) // group + 1, len(order)) + 1):
        best: tuple[float, tuple[int, ...], tuple[int, ...]] | None = None
        for combo in combinations(order, k):
            if best is not None and best[0] == 0:
                break
            if any(x not in combo for x in held):
                continue
            scored = _score(combo, order, avail, kept, n, group)
            if scored is not None and (best is None or scored[0] < best[0]):
                best = (scored[0], combo, scored[1])
        if best is None:
            continue
        _, combo, subset = best
        distribution = (n // len(combo) // group) * group
        result = retained
        for x in combo:
            node = idx.numa_mask[x]
            result |= _packed(idx, free & node, retained & node, max(distribution, kept[x]), spread, False)
        remainder = n - result.bit_count()
        while remainder > 0:
            progressed = False
            for x in subset:
                node = idx.numa_mask[x]
                if remainder == 0 or (node & free & ~result).bit_count() < group:
                    continue
                have = result & node
                result |= _packed(idx, free & node & ~result, have, have.bit_count() + group, spread, False)
                remainder -= group
                progressed = True
            if not progressed:
                break
        if remainder == 0:
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
