"""takeByTopology: choose N CPUs out of an available set, making the kubelet's choices.

Pure functions of (topology, available CPUs, N, options). Behaviour follows the
kubelet's ``cpu_assignment.go`` (``takeByTopologyNUMAPacked`` and friends): whole NUMA
nodes / sockets (whichever level is larger first), then optionally whole uncore caches,
then whole cores, then single threads, with the same sort orders and tie-breaks.

The bookkeeping differs: free CPUs are one int bitmask, groups are precomputed masks
(``allocator_index``), so each free count is one AND + popcount instead of a scan.

Known, deliberate differences from the kubelet (only on irregular topologies):
* a group is never listed twice in a sort order (the kubelet can list a socket that
  spans several NUMA nodes once per node and then count its CPUs twice);
* taking a "free" socket/core takes only its available CPUs (the kubelet compares free
  counts against machine-wide averages and could take busy siblings of uneven cores).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..cpuset import CPUSet
from ..errors import InsufficientCPUs
from ..topology.model import Topology
from .index import TopologyIndex, index_for


class _Accumulator:
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
        idx = self.idx
        per_core = idx.cpus_per_core
        cores_needed = (self.needed + per_core - 1) // per_core
        in_uncore = idx.uncore_mask[uncore] & self.free
        cores = [c for c in idx.cores_in_uncore.get(uncore, ()) if idx.core_mask[c] & in_uncore][
            :cores_needed
        ]
        mask = 0
        for c in cores:
            mask |= idx.core_mask[c] & self.free
        # An odd remainder on SMT takes one thread less from the last (highest) core.
        if self.needed % 2 and per_core > 1 and mask.bit_count() > self.needed:
            mask &= ~(1 << (mask.bit_length() - 1))
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


def _check_request(idx: TopologyIndex, available: CPUSet, n: int) -> int:
    if n < 0:
        raise ValueError(f"cannot take a negative number of CPUs ({n})")
    unknown = available.mask & ~idx.all_mask
    if unknown:
        raise ValueError(f"available CPUs {CPUSet.from_mask(unknown)} are not online CPUs of this topology")
    if n > len(available):
        raise InsufficientCPUs(n, len(available))
    return available.mask


def _packed_mask(idx: TopologyIndex, free: int, n: int, spread: bool, uncore: bool) -> int:
    acc = _Accumulator(idx, free, n)
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


def take_by_topology_numa_packed(
    topology: Topology,
    available: CPUSet,
    n: int,
    *,
    spread: bool = False,
    prefer_align_by_uncore_cache: bool = False,
) -> CPUSet:
    """N CPUs packed onto as few NUMA nodes / sockets / caches / cores as the kubelet would.

    ``spread`` is the distribute-cpus-across-cores variant (no whole-core step; threads
    are taken in ascending CPU id per socket, i.e. one thread per core first).
    ``prefer_align_by_uncore_cache`` adds the whole/partial L3 step. Raises
    ``InsufficientCPUs`` when ``available`` has fewer than N CPUs.
    """
    idx = index_for(topology)
    free = _check_request(idx, available, n)
    return CPUSet.from_mask(_packed_mask(idx, free, n, spread, prefer_align_by_uncore_cache))


def take_by_topology_spread(topology: Topology, available: CPUSet, n: int) -> CPUSet:
    """The distribute-cpus-across-cores allocation (kubelet's "spread" CPU sorting)."""
    return take_by_topology_numa_packed(topology, available, n, spread=True)


def take_by_topology_uncore(topology: Topology, available: CPUSet, n: int, *, spread: bool = False) -> CPUSet:
    """The prefer-align-cpus-by-uncorecache allocation."""
    return take_by_topology_numa_packed(
        topology, available, n, spread=spread, prefer_align_by_uncore_cache=True
    )


def take_by_topology_numa_distributed(
    topology: Topology, available: CPUSet, n: int, *, cpu_group_size: int = 1, spread: bool = False
) -> CPUSet:
    """N CPUs spread evenly over the fewest NUMA nodes that can hold them (distribute-cpus-across-numa).

    CPUs go out in groups of ``cpu_group_size`` (threads per core under full-pcpus-only).
    Falls back to the packed allocation when N is not a multiple of the group size or
    no NUMA combination balances, exactly as the kubelet does.
    """
    from .distributed import distributed_mask  # local: the two modules call each other

    if cpu_group_size < 1:
        raise ValueError(f"cpu_group_size must be at least 1, got {cpu_group_size}")
    idx = index_for(topology)
    free = _check_request(idx, available, n)
    return CPUSet.from_mask(distributed_mask(idx, free, n, cpu_group_size, spread))


def take_by_topology(
    topology: Topology,
    available: CPUSet,
    n: int,
    *,
    full_pcpus_only: bool = False,
    distribute_cpus_across_numa: bool = False,
    distribute_cpus_across_cores: bool = False,
    prefer_align_by_uncore_cache: bool = False,
) -> CPUSet:
    """Dispatch as the kubelet's ``staticPolicy.takeByTopology`` does for a set of policy options."""
    if distribute_cpus_across_numa:
        group = index_for(topology).cpus_per_core if full_pcpus_only else 1
        return take_by_topology_numa_distributed(
            topology, available, n, cpu_group_size=group, spread=distribute_cpus_across_cores
        )
    return take_by_topology_numa_packed(
        topology,
        available,
        n,
        spread=distribute_cpus_across_cores,
        prefer_align_by_uncore_cache=prefer_align_by_uncore_cache,
    )
