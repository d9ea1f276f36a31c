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
    facts = []
    for p, (s, i) in enumerate(physical):
        for t in range(t_count):
            cpu = p + t * total_cores if shape.siblings == "spread" else p * t_count + t
            facts.append(CPUFacts(
                cpu=cpu, socket=s, die=i * shape.dies_per_socket // cps,
                core_id={"machine": p, "socket": i, "die": i % cores_per_die}[shape.core_id_scope],
                numa=s * shape.numa_per_socket + i // shape.cores_per_numa,
                l3=s * l3_per_socket + i * l3_per_socket // cps,
                online=cpu not in shape.offline, isolated=cpu in shape.isolated, core_index=p))
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


def _put(path: Path, text: str, made: set[Path] | None = None) -> None:
    if made is None or path.parent not in made:  # mkdir calls dominate on slow filesystems
        path.parent.mkdir(parents=True, exist_ok=True)
        if made is not None:
            made.add(path.parent)
    path.write_text(text + "\n")


def write_tree(root: Path | str, shape: Shape) -> Path:
    """Write ``<root>/sys/devices/system/{cpu,node}`` for ``shape``; returns ``root``."""
    root = Path(root)
    base = root / "sys" / "devices" / "system"
    cpu_dir, node_dir = base / "cpu", base / "node"
    facts = layout(shape)
    made: set[Path] = set()
    online = {f.cpu for f in facts if f.online}
    present = {f.cpu for f in facts}
    possible = set(range(len(facts) + shape.possible_extra))
    _put(cpu_dir / "present", cpulist(present), made)
    _put(cpu_dir / "possible", cpulist(possible), made)
    _put(cpu_dir / "online", cpulist(online), made)
    _put(cpu_dir / "offline", cpulist(possible - online), made)
    _put(cpu_dir / "isolated", cpulist(set(shape.isolated)))
    by_core: dict[int, set[int]] = {}
    by_l3: dict[int, set[int]] = {}
    for f in facts:
        if f.online:
            by_core.setdefault(f.core_index, set()).add(f.cpu)
            by_l3.setdefault(f.l3, set()).add(f.cpu)
    for f in facts:
        d = cpu_dir / f"cpu{f.cpu}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"node{f.numa}").symlink_to(f"../../node/node{f.numa}")
        if not f.online:
            continue
        topo = d / "topology"
        _put(topo / "physical_package_id", str(f.socket), made)
        _put(topo / "die_id", str(f.die), made)
        _put(topo / "core_id", str(f.core_id), made)
        _put(topo / "thread_siblings_list", cpulist(by_core[f.core_index]), made)
        _put(topo / "core_cpus_list", cpulist(by_core[f.core_index]), made)
        for index, level in enumerate((1, 1, 2) if shape.l1_l2_files else ()):
            _put(d / "cache" / f"index{index}" / "level", str(level), made)
        l3 = d / "cache" / "index3"
        _put(l3 / "level", "3", made)
        if shape.l3_id_files:
            _put(l3 / "id", str(f.l3), made)
        _put(l3 / "shared_cpu_list", cpulist(by_l3[f.l3]), made)
    nodes = shape.numa_nodes + shape.cpuless_nodes
    for n in range(nodes):
        nd = node_dir / f"node{n}"
        _put(nd / "cpulist", cpulist({f.cpu for f in facts if f.numa == n and f.online}), made)
        _put(nd / "distance", " ".join(str(shape.distance(n, m)) for m in range(nodes)))
        kib = shape.mem_kib_per_numa
        _put(nd / "meminfo", f"Node {n} MemTotal:       {kib} kB\nNode {n} MemFree:        {kib // 2} kB\n"
                             f"Node {n} MemUsed:        {kib - kib // 2} kB", made)
    _put(node_dir / "online", cpulist(set(range(nodes))))
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
}

LARGE: dict[str, Shape] = {
    # kubelet topoDualSocketMultiNumaPerSocketHTLarge (dual EPYC 7742, NPS=4): node n = 16n.., +128
    "dual-socket-8numa-256": Shape(sockets=2, numa_per_socket=4, cores_per_numa=16, l3_per_socket=16,
                                   distances=tuple(tuple(10 if a == b else 12 if a // 4 == b // 4 else 32
                                                         for b in range(8)) for a in range(8)),
                                   l1_l2_files=False),
    "quad-socket-16numa-1024": Shape(sockets=4, numa_per_socket=4, cores_per_numa=32, l3_per_socket=8,
                                     l1_l2_files=False),
}

_TOPOLOGY_FILES = ("physical_package_id", "die_id", "core_id", "thread_siblings_list", "core_cpus_list")


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
            if copy(f"{rel}/level") and (index / "level").read_text().strip() == "3":
                copy(f"{rel}/id")
                copy(f"{rel}/shared_cpu_list")
        for link in (src / "cpu" / cpu).glob("node*"):
            if link.is_symlink():
                (out / "cpu" / cpu / link.name).symlink_to(os.readlink(link))
    copy("node/online")
    for node in sorted((src / "node").glob("node*")) if (src / "node").is_dir() else []:
        for name in ("cpulist", "distance", "meminfo"):
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
