"""The kubelet's named test topologies (pkg/kubelet/cm/cpumanager/policy_test.go) as Topology objects.

Shapes restated from the upstream test file; the kubelet's CoreID values are used as
our per-socket ``core`` ids. Where upstream sets no UncoreCacheID every CPU is in
cache 0, as in the kubelet (one "uncore" for the whole machine).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from nri_pinner.engine.topology.model import CPUInfo, Topology

# cpu -> (socket, core, numa, l3)
Shape = Callable[[int], tuple[int, int, int, int]]


def _build(n: int, shape: Shape, isolated: Iterable[int] = (), offline: Iterable[int] = ()) -> Topology:
    iso, off = set(isolated), set(offline)
    cpus = []
    for cpu in range(n):
        socket, core, numa, l3 = shape(cpu)
        cpus.append(
            CPUInfo(
                cpu=cpu,
                socket=socket,
                core=core,
                numa=numa,
                l3=l3,
                online=cpu not in off,
                isolated=cpu in iso,
            )
        )
    return Topology(cpus=tuple(cpus))


def single_socket_ht() -> Topology:
    """8 CPUs, 1 socket, 4 cores, core c = {c, c+4}."""
    return _build(8, lambda c: (0, c % 4, 0, 0))


def dual_socket_ht() -> Topology:
    """12 CPUs, CPU n on core n%6; even cores on socket/NUMA 0, odd on socket/NUMA 1."""
    return _build(12, lambda c: (c % 2, c % 6, c % 2, 0))


def dual_socket_no_ht() -> Topology:
    """8 CPUs, no SMT, socket/NUMA 0 = 0-3, socket/NUMA 1 = 4-7."""
    return _build(8, lambda c: (c // 4, c, c // 4, 0))


def triple_socket_ht() -> Topology:
    """18 CPUs, siblings adjacent; socket 1 = 0-5, socket 0 = 6-11, socket 2 = 12-17 (NUMA = socket)."""
    socket_of_block = (1, 0, 2)
    return _build(18, lambda c: (socket_of_block[c // 6], c // 2, socket_of_block[c // 6], 0))


def dual_socket_multi_numa_per_socket_ht() -> Topology:
    """80 CPUs (dual Xeon Gold 6230): NUMA n = 10n..10n+9 and +40; sockets hold NUMA 0-1 and 2-3."""
    return _build(80, lambda c: ((c % 40) // 20, c % 40, (c % 40) // 10, 0))


def fake_multi_socket_dual_socket_per_numa_ht() -> Topology:
    """80 CPUs with sockets and NUMA flipped: socket s = 10s..10s+9 and +40, NUMA 0 = sockets 0-1."""
    return _build(80, lambda c: ((c % 40) // 10, c % 40, (c % 40) // 20, 0))


def dual_socket_multi_numa_per_socket_ht_large() -> Topology:
    """256 CPUs (EPYC 7742, NPS=4): NUMA n = 16n..16n+15 and +128, 4 NUMA nodes per socket."""
    return _build(256, lambda c: ((c % 128) // 64, c % 128, (c % 128) // 16, 0))


_QUAD_SOCKET_CORES: dict[int, dict[int, tuple[int, int, int, int]]] = {
    0: {
        0: (0, 169, 109, 229),
        1: (50, 170, 110, 230),
        64: (1, 25, 13, 38),
        65: (2, 26, 14, 39),
        72: (9, 33, 21, 46),
        73: (10, 34, 22, 47),
        8: (57, 177, 117, 237),
        9: (58, 178, 118, 238),
        24: (71, 191, 131, 251),
        25: (72, 192, 132, 252),
        32: (79, 199, 139, 259),
        33: (80, 200, 140, 260),
        40: (87, 207, 147, 267),
        41: (88, 208, 148, 268),
        48: (95, 215, 155, 275),
        49: (96, 216, 156, 276),
        56: (103, 223, 163, 283),
        57: (104, 224, 164, 284),
    },
    1: {
        66: (3, 27, 15, 40),
        67: (4, 28, 16, 41),
        74: (11, 35, 23, 48),
        75: (12, 36, 24, 49),
        2: (51, 171, 111, 231),
        3: (52, 172, 112, 232),
        10: (59, 179, 119, 239),
        11: (60, 180, 120, 240),
        18: (65, 185, 125, 245),
        19: (66, 186, 126, 246),
        26: (73, 193, 133, 253),
        27: (74, 194, 134, 254),
        34: (81, 201, 141, 261),
        35: (82, 202, 142, 262),
        42: (89, 209, 149, 269),
        43: (90, 210, 150, 270),
        50: (97, 217, 157, 277),
        51: (98, 218, 158, 278),
    },
    2: {
        68: (5, 29, 17, 42),
        69: (6, 30, 18, 43),
        4: (53, 173, 113, 233),
        5: (54, 174, 114, 234),
        12: (61, 181, 121, 241),
        13: (62, 182, 122, 242),
        20: (67, 187, 127, 247),
        21: (68, 188, 128, 248),
        28: (75, 195, 135, 255),
        29: (76, 196, 136, 256),
        36: (83, 203, 143, 263),
        37: (84, 204, 144, 264),
        44: (91, 211, 151, 271),
        45: (92, 212, 152, 272),
        52: (99, 219, 159, 279),
        53: (100, 220, 160, 280),
        60: (105, 225, 165, 285),
        61: (106, 226, 166, 286),
    },
    3: {
        70: (7, 31, 19, 44),
        71: (8, 32, 20, 45),
        63: (37, 168, 108, 228),
        62: (107, 227, 167, 287),
        6: (55, 175, 115, 235),
        7: (56, 176, 116, 236),
        14: (63, 183, 123, 243),
        15: (64, 184, 124, 244),
        22: (69, 189, 129, 249),
        23: (70, 190, 130, 250),
        30: (77, 197, 137, 257),
        31: (78, 198, 138, 258),
        38: (85, 205, 145, 265),
        39: (86, 206, 146, 266),
        46: (93, 213, 153, 273),
        47: (94, 214, 154, 274),
        54: (101, 221, 161, 281),
        55: (102, 222, 162, 282),
    },
}


def quad_socket_four_way_ht() -> Topology:
    """288 CPUs, 4 sockets (NUMA = socket), 72 cores of 4 threads: Xeon Phi KNL SNC4 irregular numbering."""
    where = {
        cpu: (socket, core)
        for socket, cores in _QUAD_SOCKET_CORES.items()
        for core, cpus in cores.items()
        for cpu in cpus
    }
    assert sorted(where) == list(range(288)), "quad-socket table must cover CPUs 0-287 once"
    return _build(288, lambda c: (where[c][0], where[c][1], where[c][0], 0))


def uncore_single_socket_no_smt() -> Topology:
    """16 CPUs, no SMT, one socket/NUMA, 4 uncore caches of 4 CPUs."""
    return _build(16, lambda c: (0, c, 0, c // 4))


def uncore_dual_socket_no_smt() -> Topology:
    """16 CPUs, no SMT, sockets 0-7 / 8-15, one NUMA node, 4 uncore caches of 4 CPUs."""
    return _build(16, lambda c: (c // 8, c, 0, c // 4))


def uncore_single_socket_multi_numa() -> Topology:
    """16 CPUs, no SMT, one socket, NUMA 0-7 / 8-15, 4 uncore caches of 4 CPUs.

    Upstream leaves NumNUMANodes unset here, so the kubelet treats NUMA as the outer
    level; with the real NUMA count sockets come first. The one case using it gives the
    same result either way.
    """
    return _build(16, lambda c: (0, c, c // 8, c // 4))


def uncore_single_socket_smt() -> Topology:
    """16 CPUs, 8 cores (siblings c, c+8), one socket/NUMA, uncore 0 = cores 0-3, uncore 1 = cores 4-7."""
    return _build(16, lambda c: (0, c % 8, 0, (c % 8) // 4))


def regular(
    sockets: int,
    numa_per_socket: int,
    cores_per_numa: int,
    threads: int,
    cores_per_l3: int | None = None,
    isolated: Iterable[int] = (),
    offline: Iterable[int] = (),
) -> Topology:
    """A regular machine numbered like Linux: thread t of global core k is CPU k + t * total_cores."""
    total_cores = sockets * numa_per_socket * cores_per_numa
    per_l3 = cores_per_l3 or cores_per_numa

    def shape(cpu: int) -> tuple[int, int, int, int]:
        core = cpu % total_cores
        numa = core // cores_per_numa
        return numa // numa_per_socket, core, numa, core // per_l3

    return _build(total_cores * threads, shape, isolated, offline)


# Uncore topologies of TestStaticPolicyAddWithUncoreAlignment. Upstream writes every CPU out;
# the formulas below reproduce those listings as read in wongchar/kubernetes
# pkg/kubelet/cm/cpumanager/policy_test.go @ 0f3890c0c2d62207bfcc15437d723f28d206261c.
# ``CoreID`` there is machine-wide, so it is also unique within each socket, as ours must be.


def dual_socket_smt_uncore() -> Topology:
    """topoDualSocketSingleNumaPerSocketSMTUncore (2x EPYC 9654): 384 CPUs, core k = {k, k+192},
    socket/NUMA = core // 96, uncore = core // 8 (16 CPUs per uncore, 24 uncores)."""
    return _build(384, lambda c: ((c % 192) // 96, c % 192, (c % 192) // 96, (c % 192) // 8))


def single_socket_smt_small_uncore() -> Topology:
    """topoSingleSocketSingleNumaPerSocketSMTSmallUncore (EPYC 7702P): 128 CPUs, core k = {k, k+64},
    one socket/NUMA, uncore = core // 4 (8 CPUs per uncore, 16 uncores)."""
    return _build(128, lambda c: (0, c % 64, 0, (c % 64) // 4))


def single_socket_no_smt_small_uncore() -> Topology:
    """topoSingleSocketSingleNumaPerSocketNoSMTSmallUncore: CPUs 0-63 listed, no SMT, uncore = cpu // 4.

    Upstream's header says NumCPUs 128 / NumCores 64 / 16 uncores although only 64 CPUs are
    listed, so the kubelet derives 2 CPUs per core and 8 per uncore for it; we model the listing.
    """
    return _build(64, lambda c: (0, c, 0, c // 4))


def small_dual_socket_no_smt_uncore() -> Topology:
    """topoSmallDualSocketSingleNumaPerSocketNoSMTUncore (2x EPYC 7303): 64 CPUs, no SMT,
    socket/NUMA = cpu // 32, uncore = cpu // 8."""
    return _build(64, lambda c: (c // 32, c, c // 32, c // 8))


def dual_socket_sub_numa_ht_monolithic_uncore() -> Topology:
    """topoDualSocketSubNumaPerSocketHTMonolithicUncore (2x Xeon 8490H, SNC): 240 CPUs,
    core k = {k, k+120}, socket = core // 60, NUMA = core // 30, one uncore per socket."""
    return _build(240, lambda c: ((c % 120) // 60, c % 120, (c % 120) // 30, (c % 120) // 60))


def single_socket_pcore_ht_monolithic_uncore() -> Topology:
    """topoSingleSocketSingleNumaPerSocketPCoreHTMonolithicUncore (i7-12850HX): 24 CPUs, one uncore;
    CPUs 0-7 are single-thread cores 0-7, P-cores 8-15 are {8, 16} .. {15, 23}."""
    return _build(24, lambda c: (0, c if c < 16 else c - 8, 0, 0))


def single_socket_monolithic_uncore() -> Topology:
    """topoSingleSocketSingleNumaPerSocketUncore (Graviton3): 64 CPUs, no SMT, one uncore."""
    return _build(64, lambda c: (0, c, 0, 0))
