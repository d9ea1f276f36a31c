"""Per-topology lookup tables for the allocator, built once and cached on the Topology.

The kubelet's ``cpuAccumulator`` answers "how many free CPUs does core/socket/NUMA X
have" by scanning its whole CPU map on every sort comparison. Here every group is a
bitmask, so a free count is ``(group_mask & free).bit_count()``; the group lists below
are precomputed so a sort only touches groups that exist.

IDs follow the kubelet: NUMA node, socket and uncore (L3) ids as the topology gives
them. A core's id orders cores like the kubelet's CoreID does when it breaks ties between
equally free cores: by (socket, core id), i.e. ``Topology.core_of``. On the kubelet's test
topologies that is their CoreID (topoQuadSocketFourWayHT numbers CPUs unlike its cores);
on a real machine the kubelet uses the lowest CPU of the core, which sorts the cores of one
socket the same way whenever sysfs core ids rise with CPU numbers (every machine we know).
Only online CPUs exist here, as in the kubelet's cAdvisor-built topology.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..topology.model import Topology

_CACHE_ATTR = "_nri_pinner_allocator_index"


class TopologyIndex:
    """Bitmask view of one Topology's online CPUs, grouped the way the kubelet groups them."""

    __slots__ = (
        "all_mask",
        "core_mask",
        "core_of_cpu",
        "cores_in_numa",
        "cores_in_socket",
        "cores_in_uncore",
        "cpus_per_core",
        "cpus_per_socket",
        "cpus_per_uncore",
        "numa_first",
        "numa_ids",
        "numa_mask",
        "numa_of_cpu",
        "numas_in_socket",
        "regular_cores",
        "socket_ids",
        "socket_mask",
        "socket_of_cpu",
        "sockets_in_numa",
        "uncore_ids",
        "uncore_mask",
        "uncores_in_numa",
    )

    def __init__(self, topology: Topology) -> None:
        online = [topology.by_cpu[c] for c in topology.online]
        if not online:
            raise ValueError("topology has no online CPUs")
        self.core_of_cpu: dict[int, int] = {info.cpu: topology.core_of[info.cpu] for info in online}
        self.numa_of_cpu: dict[int, int] = {info.cpu: info.numa for info in online}
        self.socket_of_cpu: dict[int, int] = {info.cpu: info.socket for info in online}

        self.core_mask: dict[int, int] = {}
        self.socket_mask: dict[int, int] = {}
        self.numa_mask: dict[int, int] = {}
        self.uncore_mask: dict[int, int] = {}
        pairs_sn: set[tuple[int, int]] = set()
        pairs_sc: set[tuple[int, int]] = set()
        pairs_nc: set[tuple[int, int]] = set()
        pairs_nu: set[tuple[int, int]] = set()
        pairs_uc: set[tuple[int, int]] = set()
        for info in online:
            bit = 1 << info.cpu
            core = self.core_of_cpu[info.cpu]
            for table, key in (
                (self.core_mask, core),
                (self.socket_mask, info.socket),
                (self.numa_mask, info.numa),
                (self.uncore_mask, info.l3),
            ):
                table[key] = table.get(key, 0) | bit
            pairs_sn.add((info.socket, info.numa))
            pairs_sc.add((info.socket, core))
            pairs_nc.add((info.numa, core))
            pairs_nu.add((info.numa, info.l3))
            pairs_uc.add((info.l3, core))

        self.all_mask = sum(1 << i.cpu for i in online)
        self.socket_ids = sorted(self.socket_mask)
        self.numa_ids = sorted(self.numa_mask)
        self.uncore_ids = sorted(self.uncore_mask)
        self.sockets_in_numa = _relation((n, s) for s, n in pairs_sn)
        self.numas_in_socket = _relation(pairs_sn)
        self.cores_in_socket = _relation(pairs_sc)
        self.cores_in_numa = _relation(pairs_nc)
        self.uncores_in_numa = _relation(pairs_nu)
        self.cores_in_uncore = _relation(pairs_uc)

        n_cpus = len(online)
        # The kubelet's per-level sizes are machine-wide averages (NumCPUs / NumX).
        self.cpus_per_core = n_cpus // len(self.core_mask)
        self.cpus_per_socket = n_cpus // len(self.socket_mask)
        self.cpus_per_uncore = n_cpus // len(self.uncore_mask)
        # NUMA nodes are the outer level unless sockets are fewer than NUMA nodes.
        self.numa_first = len(self.socket_mask) >= len(self.numa_mask)
        # Every core has cpus_per_core CPUs, in one NUMA node and one socket (lets the whole-core
        # step test "all free" instead of counting, and skip its duplicate check).
        self.regular_cores = len(pairs_nc) == len(pairs_sc) == len(self.core_mask) and all(
            m.bit_count() == self.cpus_per_core for m in self.core_mask.values())


def _relation(pairs: Iterable[tuple[int, int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for a, b in sorted(pairs):
        out.setdefault(a, []).append(b)
    return out


def index_for(topology: Topology) -> TopologyIndex:
    """The cached index of ``topology`` (built on first use; a Topology never changes)."""
    idx = topology.__dict__.get(_CACHE_ATTR)
    if idx is None:
        idx = TopologyIndex(topology)
        object.__setattr__(topology, _CACHE_ATTR, idx)
    assert isinstance(idx, TopologyIndex)
    return idx
