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

from ..cpuset import CPUSet
from ..errors import InsufficientCPUs
from ..topology.model import Topology
from .distributed import distributed_mask
from .index import TopologyIndex, index_for
from .packed import packed_mask


def _check_request(idx: TopologyIndex, available: CPUSet, n: int) -> int:
    if n < 0:
        raise ValueError(f"cannot take a negative number of CPUs ({n})")
    unknown = available.mask & ~idx.all_mask
    if unknown:
        raise ValueError(f"available CPUs {CPUSet.from_mask(unknown)} are not online CPUs of this topology")
    if n > len(available):
        raise InsufficientCPUs(n, len(available))
    return available.mask


def take_by_topology_numa_packed(
    topology: Topology,
    available: CPUSet,
    n: int,
    *,
    spread: bool = False,
    prefer_align_by_uncore_cache: bool = False,
    odd_smt_uncore: bool = True,
) -> CPUSet:
    """N CPUs packed onto as few NUMA nodes / sockets / caches / cores as the kubelet would.

    ``spread`` is the distribute-cpus-across-cores variant (no whole-core step; threads
    are taken in ascending CPU id per socket, i.e. one thread per core first).
    ``prefer_align_by_uncore_cache`` adds the whole/partial L3 step, by the kubelet 1.34+
    partial-cache rule unless ``odd_smt_uncore`` is False (v1.32's; see releases.py). Raises
    ``InsufficientCPUs`` when ``available`` has fewer than N CPUs.
    """
    idx = index_for(topology)
    free = _check_request(idx, available, n)
    return CPUSet.from_mask(packed_mask(idx, free, n, spread, prefer_align_by_uncore_cache, odd_smt_uncore))


def take_by_topology_spread(topology: Topology, available: CPUSet, n: int) -> CPUSet:
    """The distribute-cpus-across-cores allocation (kubelet's "spread" CPU sorting)."""
    return take_by_topology_numa_packed(topology, available, n, spread=True)


def take_by_topology_uncore(topology: Topology, available: CPUSet, n: int, *, spread: bool = False,
                            odd_smt_uncore: bool = True) -> CPUSet:
    """The prefer-align-cpus-by-uncorecache allocation (``odd_smt_uncore=False``: kubelet v1.32's)."""
    return take_by_topology_numa_packed(
        topology, available, n, spread=spread, prefer_align_by_uncore_cache=True, odd_smt_uncore=odd_smt_uncore
    )


def take_by_topology_numa_distributed(
    topology: Topology, available: CPUSet, n: int, *, cpu_group_size: int = 1, spread: bool = False
) -> CPUSet:
    """N CPUs spread evenly over the fewest NUMA nodes that can hold them (distribute-cpus-across-numa).

    CPUs go out in groups of ``cpu_group_size`` (threads per core under full-pcpus-only).
    Falls back to the packed allocation when N is not a multiple of the group size or
    no NUMA combination balances, exactly as the kubelet does.
    """
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
    odd_smt_uncore: bool = True,
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
        odd_smt_uncore=odd_smt_uncore,
    )
