#!/usr/bin/env python3
"""Write sysfs CPU/NUMA trees (only the files ``nri_pinner.engine.topology.sysfs`` reads).

    python scripts/gen_sysfs.py                 # regenerate tests/fixtures/sysfs/<name> for NAMED shapes
    python scripts/gen_sysfs.py --capture NAME  # copy this host's real files to tests/fixtures/sysfs/NAME

Synthetic trees mimic the kernel: offline CPUs keep ``cpuN`` and its ``nodeM``
link but lose ``topology``/``cache`` and drop out of node cpulists and sibling
lists; ``cpu/offline`` is possible-minus-online. Tests import this file by path
(``write_tree``, ``layout``, ``Shape``) so generated and committed trees agree.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

FIXTURE_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "sysfs"


@dataclass(frozen=True)
class Shape:
    sockets: int = 1
    numa_per_socket: int = 1
    cores_per_numa: int = 4
    threads_per_core: int = 2
    dies_per_socket: int = 1
    l3_per_socket: int = 0  # 0: one L3 per NUMA node
    # "spread": thread t of logical core p is CPU p + t*cores (Intel, kubelet tables); "adjacent": p*T + t
    siblings: Literal["spread", "adjacent"] = "spread"
    interleave_sockets: bool = False  # logical cores alternate sockets (kubelet topoDualSocketHT)
    # core_id = logical core index, or index within the socket, or within the die
    core_id_scope: Literal["machine", "socket", "die"] = "machine"
    l3_id_files: bool = True
    offline: frozenset[int] = frozenset()
    isolated: frozenset[int] = frozenset()
    possible_extra: int = 0  # possible-but-absent CPUs (VMs): they show up in cpu/offline only
    distances: tuple[tuple[int, ...], ...] | None = None  # default 10 local, 11 same socket, 21 remote
    mem_kib_per_numa: int = 8 * 1024 * 1024
    cpuless_nodes: int = 0  # memory-only nodes after the CPU nodes (CXL, HBM)
    l1_l2_files: bool = True  # cache/index0-2 (skipped in big trees: file creation is the slow part)
    # -- what real kernels and firmware do (see the issue "topology that survives real machines") --
    old_kernel: bool = False  # masks only: no *_list files, no die/cluster files, no cache id (< 4.x)
    nul_terminated: bool = False  # every file ends in "\n\0" (seen on some arm64/POWER kernels)
    package_id: int | None = None  # force physical_package_id (-1: firmware did not say; 0: not unique)
    online_files: Literal["global", "per-cpu", "none"] = "global"  # cpu/online, else cpuN/online, else none
    extra_numa_claims: tuple[tuple[int, int], ...] = ()  # (cpu, node): firmware lists cpu in node too
    numa_moves: tuple[tuple[int, int], ...] = ()  # (cpu, node): firmware puts cpu in another node
    distance_row_extra: int = 0  # extra trailing values in every distance row
    first_node: int = 0  # node ids start here (node 0 absent)
    clusters_per_die: int = 0  # 0: no cluster files
    e_cores_per_socket: int = 0  # the last N cores of each socket are efficiency cores
    # how E-cores show: cpu_core/cpu_atom PMUs, cpu_capacity, or only cpufreq's max frequency
    hybrid: Literal["intel", "capacity", "cpufreq"] = "intel"

    @property
    def cores_per_socket(self) -> int:
        return self.numa_per_socket * self.cores_per_numa

    @property
    def numa_nodes(self) -> int:
        return self.sockets * self.numa_per_socket

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    def distance(self, a: int, b: int) -> int:
        """Distance between node indexes (ids minus first_node)."""
        if self.distances is not None:
            return self.distances[a][b]
        if a == b:
            return 10
        same_socket = a // self.numa_per_socket == b // self.numa_per_socket
        return 11 if same_socket and max(a, b) < self.numa_nodes else 21


@dataclass(frozen=True)
class CPUFacts:
    cpu: int
    socket: int
    die: int
    core_id: int
    numa: int
    l3: int
    online: bool
    isolated: bool
    core_index: int  # machine-wide physical core (for sibling lists)
    cluster: int = 0  # machine-wide cluster index
    kind: str = ""  # "P"/"E" on hybrid shapes


def layout(shape: Shape) -> list[CPUFacts]:
    """What each logical CPU of ``shape`` is: the truth the tree is written from."""
    cps, t_count = shape.cores_per_socket, shape.threads_per_core
    if cps % shape.dies_per_socket:
        raise ValueError(f"{cps} cores per socket do not split into {shape.dies_per_socket} dies")
    l3_per_socket = shape.l3_per_socket or shape.numa_per_socket
    if cps % l3_per_socket:
        raise ValueError(f"{cps} cores per socket do not split into {l3_per_socket} L3 groups")
    physical = [(s, i) for s in range(shape.sockets) for i in range(cps)]
    if shape.interleave_sockets:
        physical.sort(key=lambda si: (si[1], si[0]))
    total_cores = len(physical)
    cores_per_die = cps // shape.dies_per_socket
    clusters = shape.clusters_per_die or 1
    if cores_per_die % clusters:
        raise ValueError(f"{cores_per_die} cores per die do not split into {clusters} clusters")
    facts = []
    for p, (s, i) in enumerate(physical):
        for t in range(t_count):
            cpu = p + t * total_cores if shape.siblings == "spread" else p * t_count + t
            facts.append(CPUFacts(
                cpu=cpu, socket=s, die=i * shape.dies_per_socket // cps,
                core_id={"machine": p, "socket": i, "die": i % cores_per_die}[shape.core_id_scope],
                numa=shape.first_node + s * shape.numa_per_socket + i // shape.cores_per_numa,
                l3=s * l3_per_socket + i * l3_per_socket // cps,
                online=cpu not in shape.offline, isolated=cpu in shape.isolated, core_index=p,
                cluster=(s * cps + i) // (cores_per_die // clusters),
                kind=("E" if i >= cps - shape.e_cores_per_socket else "P") if shape.e_cores_per_socket else ""))
    return sorted(facts, key=lambda f: f.cpu)


def cpulist(cpus: Iterable[int]) -> str:
    """Kernel list syntax, written independently of CPUSet so the two check each other."""
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def cpumask(cpus: Iterable[int], nbits: int) -> str:
    """Kernel mask syntax: 32-bit hex words, most significant first, as many as nbits needs."""
    mask = sum(1 << c for c in cpus)
    words = max(1, (nbits + 31) // 32)
    return ",".join(f"{(mask >> (32 * w)) & 0xFFFFFFFF:08x}" for w in reversed(range(words)))


class _Writer:
    def __init__(self, shape: Shape, nbits: int) -> None:
        self.end = "\n\0" if shape.nul_terminated else "\n"
        self.old = shape.old_kernel
        self.nbits = nbits
        self.made: set[Path] = set()

    def put(self, path: Path, text: str) -> None:
        if path.parent not in self.made:  # mkdir calls dominate on slow filesystems
            path.parent.mkdir(parents=True, exist_ok=True)
            self.made.add(path.parent)
        path.write_text(text + self.end)

    def cpus(self, directory: Path, mask_name: str, list_name: str, cpus: Iterable[int]) -> None:
        """A set both ways (mask + list), or mask only on old kernels."""
        cpus = sorted(cpus)
        self.put(directory / mask_name, cpumask(cpus, self.nbits))
        if not self.old:
            self.put(directory / list_name, cpulist(cpus))


def write_tree(root: Path | str, shape: Shape) -> Path:
    """Write ``<root>/sys/devices/system/{cpu,node}`` for ``shape``; returns ``root``."""
    root = Path(root)
    base = root / "sys" / "devices" / "system"
    cpu_dir, node_dir = base / "cpu", base / "node"
    facts = layout(shape)
    online = {f.cpu for f in facts if f.online}
    present = {f.cpu for f in facts}
    possible = set(range(len(facts) + shape.possible_extra))
    w = _Writer(shape, len(possible))
    w.put(cpu_dir / "present", cpulist(present))
    w.put(cpu_dir / "possible", cpulist(possible))
    if shape.online_files == "global":
        w.put(cpu_dir / "online", cpulist(online))
        w.put(cpu_dir / "offline", cpulist(possible - online))
    w.put(cpu_dir / "isolated", cpulist(set(shape.isolated)))
    groups: dict[str, dict[object, set[int]]] = {}
    for f in facts:
        if f.online:
            for level, key in (("core", f.core_index), ("l3", f.l3), ("pkg", f.socket), ("die", (f.socket, f.die)),
                               ("cluster", f.cluster)):
                groups.setdefault(level, {}).setdefault(key, set()).add(f.cpu)
    for f in facts:
        d = cpu_dir / f"cpu{f.cpu}"
        d.mkdir(parents=True, exist_ok=True)
        w.made.add(d)
        (d / f"node{f.numa}").symlink_to(f"../../node/node{f.numa}")
        if shape.online_files == "per-cpu" and f.cpu != 0:  # cpu0 is not hot-pluggable: no file
            w.put(d / "online", "1" if f.online else "0")
        if shape.e_cores_per_socket and shape.hybrid == "capacity":
            w.put(d / "cpu_capacity", "446" if f.kind == "E" else "1024")
        if shape.e_cores_per_socket and shape.hybrid == "cpufreq":
            w.put(d / "cpufreq" / "cpuinfo_max_freq", "1800000" if f.kind == "E" else "2808000")
        if not f.online:
            continue
        topo = d / "topology"
        package = f.socket if shape.package_id is None else shape.package_id
        w.put(topo / "physical_package_id", str(package))
        w.put(topo / "core_id", str(f.core_id))
        w.cpus(topo, "thread_siblings", "thread_siblings_list", groups["core"][f.core_index])
        w.cpus(topo, "core_siblings", "core_siblings_list", groups["pkg"][f.socket])
        if not shape.old_kernel:
            w.put(topo / "die_id", str(f.die))
            w.cpus(topo, "core_cpus", "core_cpus_list", groups["core"][f.core_index])
            w.cpus(topo, "package_cpus", "package_cpus_list", groups["pkg"][f.socket])
            w.cpus(topo, "die_cpus", "die_cpus_list", groups["die"][(f.socket, f.die)])
            if shape.clusters_per_die:
                w.put(topo / "cluster_id", str(f.cluster))
                w.cpus(topo, "cluster_cpus", "cluster_cpus_list", groups["cluster"][f.cluster])
        caches = [(1, "Data"), (1, "Instruction"), (2, "Unified")] if shape.l1_l2_files else []
        for index, (cache_level, cache_type) in enumerate([*caches, (3, "Unified")]):
            cd = d / "cache" / f"index{index if shape.l1_l2_files else 3}"
            w.put(cd / "level", str(cache_level))
            w.put(cd / "type", cache_type)
            shared = groups["core"][f.core_index] if cache_level < 3 else groups["l3"][f.l3]
            w.cpus(cd, "shared_cpu_map", "shared_cpu_list", shared)
            if cache_level == 3 and shape.l3_id_files and not shape.old_kernel:
                w.put(cd / "id", str(f.l3))
    if shape.e_cores_per_socket and shape.hybrid == "intel":
        for pmu, kind in (("cpu_core", "P"), ("cpu_atom", "E")):
            w.put(root / "sys" / "devices" / pmu / "cpus", cpulist(f.cpu for f in facts if f.kind == kind))
    nodes = [shape.first_node + i for i in range(shape.numa_nodes + shape.cpuless_nodes)]
    claims = {n: {f.cpu for f in facts if f.numa == n and f.online} for n in nodes}
    for cpu, node in shape.numa_moves:
        for members in claims.values():
            members.discard(cpu)
        claims[node].add(cpu)
    for cpu, node in shape.extra_numa_claims:
        claims[node].add(cpu)
    for i, n in enumerate(nodes):
        nd = node_dir / f"node{n}"
        w.cpus(nd, "cpumap", "cpulist", claims[n])
        row = [shape.distance(i, j) for j in range(len(nodes))] + [20] * shape.distance_row_extra
        w.put(nd / "distance", " ".join(map(str, row)))
        kib = shape.mem_kib_per_numa
        w.put(nd / "meminfo", f"Node {n} MemTotal:       {kib} kB\nNode {n} MemFree:        {kib // 2} kB\n"
                              f"Node {n} MemUsed:        {kib - kib // 2} kB")
    w.put(node_dir / "online", cpulist(nodes))
    w.put(node_dir / "possible", cpulist(nodes))
    return root


NAMED: dict[str, Shape] = {
    # kubelet topoSingleSocketHT: core c = {c, c+4}
    "single-socket-ht": Shape(cores_per_numa=4, mem_kib_per_numa=16 * 1024 * 1024),
    # kubelet topoDualSocketHT: cores alternate sockets, core c = {c, c+6}
    "dual-socket-ht": Shape(sockets=2, cores_per_numa=3, interleave_sockets=True),
    # Xeon with sub-NUMA clustering: 2 nodes per socket share one L3; core_id restarts per socket
    "dual-socket-snc": Shape(sockets=2, numa_per_socket=2, cores_per_numa=2, l3_per_socket=1,
                             core_id_scope="socket"),
    # EPYC-like: one node, four CCX L3 groups, adjacent sibling numbering
    "amd-multi-l3": Shape(cores_per_numa=8, l3_per_socket=4, siblings="adjacent"),
    # 2 nodes x 4 cores x 2 threads (core p = {p, p+8}): core 3 (3,11) and CPU 6 offline,
    # core 2 (2,10) and CPU 14 (sibling of offline 6) isolated; possible 0-31 as on VMs
    "offline-isolated": Shape(numa_per_socket=2, cores_per_numa=4, offline=frozenset({3, 6, 11}),
                              isolated=frozenset({2, 10, 14}), possible_extra=16),
    # -- what real machines get wrong (issue 22); each case numbered as in the issue --
    # 1: every file NUL-terminated (list and mask parsing must strip it)
    "nul-terminated": Shape(l1_l2_files=False, cores_per_numa=4, nul_terminated=True),
    # 2+3: pre-4.x kernel: masks only (3 words: 64 present + 32 possible-extra CPUs), no cache id,
    # no die files; 2 sockets x 2 nodes
    "old-kernel-masks": Shape(l1_l2_files=False, sockets=2, numa_per_socket=2, cores_per_numa=8, possible_extra=32,
                              old_kernel=True),
    # 3: modern kernel without cache/index3/id (some architectures): L3 groups from shared_cpu_list
    "no-cache-id": Shape(l1_l2_files=False, cores_per_numa=8, l3_per_socket=4, siblings="adjacent", l3_id_files=False),
    # 4: physical_package_id -1 everywhere (virtual machines, some POWER)
    "package-id-minus-one": Shape(l1_l2_files=False, sockets=2, cores_per_numa=2, package_id=-1),
    # 4: package ids not unique (s390 books/drawers): two packages both say 0
    "package-id-repeated": Shape(l1_l2_files=False, sockets=2, cores_per_numa=2, package_id=0),
    # 5: CPU 3 (node 1) also listed in node 2: the first node keeps it
    "fw-cpu-in-two-nodes": Shape(l1_l2_files=False, sockets=3, cores_per_numa=2, threads_per_core=1,
                                 extra_numa_claims=((3, 2),)),
    # 5: firmware lists CPU 4 (sibling of CPU 0, node 0) in node 1: siblings span nodes
    "fw-smt-across-nodes": Shape(l1_l2_files=False, sockets=2, cores_per_numa=2, numa_moves=((4, 1),)),
    # 5: distance rows with two extra trailing values
    "fw-distance-long-rows": Shape(l1_l2_files=False, sockets=2, cores_per_numa=2, distance_row_extra=2),
    # 5: two memory-only nodes (CXL / HBM) after the CPU nodes
    "memory-only-nodes": Shape(l1_l2_files=False, sockets=2, cores_per_numa=2, cpuless_nodes=2),
    # 5: no node 0 (nodes 1-2), and CPU 0 offline
    "node0-absent-cpu0-offline": Shape(l1_l2_files=False, sockets=2, cores_per_numa=2, first_node=1,
                                       offline=frozenset({0})),
    # 6: no cpu/online or cpu/offline, no cpuN/online: all CPUs with a topology dir are online
    "no-online-files": Shape(l1_l2_files=False, cores_per_numa=2, online_files="none"),
    # 6: only per-CPU online files (cpu0 has none), CPUs 3 and 7 offline; possible 0-15
    "per-cpu-online": Shape(l1_l2_files=False, cores_per_numa=4, online_files="per-cpu", offline=frozenset({3, 7}),
                            possible_extra=8),
    # 7: Intel hybrid (cpu_core/cpu_atom PMUs): 4 P-cores + 4 E-cores, SMT off
    "hybrid-intel": Shape(l1_l2_files=False, cores_per_numa=8, threads_per_core=1, e_cores_per_socket=4),
    # 7: arm64 big.LITTLE via cpu_capacity: 2 big + 4 little, clusters per kind
    "hybrid-arm-capacity": Shape(l1_l2_files=False, cores_per_numa=6, threads_per_core=1, e_cores_per_socket=4,
                                 hybrid="capacity", l3_per_socket=1, clusters_per_die=3),
    # 7: big.LITTLE seen only through cpufreq (no cpu_capacity): 4 big + 4 little
    "hybrid-arm-cpufreq": Shape(l1_l2_files=False, cores_per_numa=8, threads_per_core=1, e_cores_per_socket=4,
                                hybrid="cpufreq"),
    # 8: 2 dies per socket, 2 L3s per die, 4 clusters (2-core L2 modules) per die
    "dies-clusters": Shape(l1_l2_files=False, sockets=2, cores_per_numa=16, threads_per_core=1,
                           dies_per_socket=2,
                           l3_per_socket=4, clusters_per_die=4),
}

LARGE: dict[str, Shape] = {
    # kubelet topoDualSocketMultiNumaPerSocketHTLarge (dual EPYC 7742, NPS=4): node n = 16n.., +128
    "dual-socket-8numa-256": Shape(sockets=2, numa_per_socket=4, cores_per_numa=16, l3_per_socket=16,
                                   distances=tuple(tuple(10 if a == b else 12 if a // 4 == b // 4 else 32
                                                         for b in range(8)) for a in range(8)),
                                   l1_l2_files=False),
    "quad-socket-16numa-1024": Shape(sockets=4, numa_per_socket=4, cores_per_numa=32, l3_per_socket=8,
                                     l1_l2_files=False),
    # the same machine on a pre-4.x kernel: mask files only, no cache ids (benchmarks/bench_discovery.py)
    "old-kernel-1024": Shape(sockets=4, numa_per_socket=4, cores_per_numa=32, l3_per_socket=8,
                             l1_l2_files=False, old_kernel=True),
}

_TOPOLOGY_FILES = ("physical_package_id", "die_id", "core_id", "cluster_id", "thread_siblings_list",
                   "core_cpus_list", "core_siblings_list", "package_cpus_list", "die_cpus_list",
                   "cluster_cpus_list", "thread_siblings", "core_cpus", "core_siblings", "package_cpus",
                   "die_cpus", "cluster_cpus")


def capture(dest: Path | str, source: Path | str = "/") -> None:
    """Copy this host's sysfs files that discovery reads (and the cpuN/nodeM links)."""
    src = Path(source) / "sys" / "devices" / "system"
    out = Path(dest) / "sys" / "devices" / "system"

    def copy(rel: str) -> bool:
        if not (src / rel).is_file():
            return False
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, out / rel)
        return True

    for name in ("online", "offline", "present", "possible", "isolated"):
        copy(f"cpu/{name}")
    for cpu in sorted(p.name for p in (src / "cpu").iterdir() if re.fullmatch(r"cpu\d+", p.name)):
        (out / "cpu" / cpu).mkdir(parents=True, exist_ok=True)
        for name in _TOPOLOGY_FILES:
            copy(f"cpu/{cpu}/topology/{name}")
        cache = src / "cpu" / cpu / "cache"
        for index in sorted(cache.glob("index*")) if cache.is_dir() else []:
            rel = f"cpu/{cpu}/cache/{index.name}"
            if copy(f"{rel}/level"):
                for name in ("type", "id", "shared_cpu_list", "shared_cpu_map"):
                    copy(f"{rel}/{name}")
        copy(f"cpu/{cpu}/online")
        copy(f"cpu/{cpu}/cpu_capacity")
        copy(f"cpu/{cpu}/cpufreq/cpuinfo_max_freq")
        for link in (src / "cpu" / cpu).glob("node*"):
            if link.is_symlink():
                (out / "cpu" / cpu / link.name).symlink_to(os.readlink(link))
    copy("node/online")
    copy("node/possible")
    for pmu in ("cpu_core", "cpu_atom"):
        if (Path(source) / "sys" / "devices" / pmu / "cpus").is_file():
            (Path(dest) / "sys" / "devices" / pmu).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(source) / "sys" / "devices" / pmu / "cpus",
                            Path(dest) / "sys" / "devices" / pmu / "cpus")
    for node in sorted((src / "node").glob("node*")) if (src / "node").is_dir() else []:
        for name in ("cpulist", "cpumap", "distance", "meminfo"):
            copy(f"node/{node.name}/{name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=FIXTURE_DIR, help="fixture directory")
    parser.add_argument("--capture", metavar="NAME", help="copy this host's /sys into OUT/NAME instead")
    parser.add_argument("--shape", choices=sorted(NAMED | LARGE), help="write only this shape")
    args = parser.parse_args(argv)
    if args.capture:
        dest = args.out / args.capture
        shutil.rmtree(dest, ignore_errors=True)
        capture(dest)
        print(f"captured /sys into {dest}")
        return 0
    shapes = {args.shape: (NAMED | LARGE)[args.shape]} if args.shape else NAMED
    for name, shape in shapes.items():
        dest = args.out / name
        shutil.rmtree(dest, ignore_errors=True)
        write_tree(dest, shape)
        print(f"wrote {dest} ({shape.cpus} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
