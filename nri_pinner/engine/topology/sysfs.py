"""Discover the host's CPU topology from a sysfs tree (``<root>/sys/devices/system``).

Reads files only, so tests point ``root`` at captured or generated trees. Real
trees are buggy (firmware) and partial (old kernels, containers): discovery never
fails on a readable tree. Each repair is one warning, and the result agrees with
hwloc's ``lstopo`` on the same tree (tests/engine/test_hwloc_diff.py checks that).
Only a missing or unreadable ``cpu`` directory is an error (``SysfsError``).

The CPUs are the ``cpuN`` directories (else ``cpu/present``). Online CPUs are
``cpu/online`` (else each ``cpuN/online``; no file means online), minus CPUs
without a ``topology`` directory when others have one (hwloc skips those). Offline
CPUs stay in the topology (online=False): NUMA node from the ``cpuN/nodeM`` link,
socket and die of most CPUs of that node, a core of their own, their node's lowest
L3 group. Levels: see ``sysfs_groups`` (cores, packages, dies, clusters, L3) and
``sysfs_numa`` (nodes, distances, memory).
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..cpuset import CPUSet
from .model import CPUInfo, Topology, TopologyError
from .sysfs_cpus import Levels, read_levels
from .sysfs_kinds import core_kinds
from .sysfs_numa import cpu_node_link, read_numa
from .sysfs_read import Reader, SysfsError

__all__ = ["Discovery", "SysfsError", "discover", "discover_with_warnings"]

log = logging.getLogger(__name__)

_CPU_DIR = re.compile(r"cpu(\d+)")


@dataclass(frozen=True)
class Discovery:
    topology: Topology
    warnings: tuple[str, ...]
    sources: dict[str, str] = field(default_factory=dict)  # level -> the sysfs files that won
    files_read: int = 0


def discover(root: str | Path = "/") -> Topology:
    """The topology under ``root``; repairs are logged as warnings."""
    found = discover_with_warnings(root)
    for message in found.warnings:
        log.warning("sysfs: %s", message)
    return found.topology


def discover_with_warnings(root: str | Path = "/") -> Discovery:
    r = Reader(Path(root))
    cpu_dir, node_dir = r.system / "cpu", r.system / "node"
    if not r.isdir(cpu_dir):
        raise SysfsError(f"no CPU directory at {cpu_dir}")
    try:
        names = os.listdir(cpu_dir)
    except OSError as exc:
        raise SysfsError(f"cannot list {cpu_dir}: {exc.strerror}") from exc
    cpus = CPUSet(int(m.group(1)) for e in names if (m := _CPU_DIR.fullmatch(e)))
    online = _online(r, cpu_dir, cpus)
    if not cpus:
        cpus = (r.cpulist(cpu_dir / "present") or CPUSet()) | online
    if not cpus:
        raise SysfsError(f"no CPUs under {cpu_dir}")
    online = _with_topology(r, cpu_dir, online & cpus)
    if not online:  # nothing usable: call CPU 0 (or the lowest) online rather than fail
        online = CPUSet([cpus.min()])
        r.warn(f"no online CPU found: treating cpu{cpus.min()} as online")
    isolated = r.cpulist(cpu_dir / "isolated")
    if isolated is None:
        r.warn(f"{cpu_dir / 'isolated'} missing: assuming no isolated CPUs")
        isolated = CPUSet()
    numa = read_numa(r, node_dir, cpus)
    levels = read_levels(r, cpu_dir, online)
    numa_of = _numa_of(r, cpu_dir, cpus, online, numa.of, numa.nodes, levels)
    kinds, kind_source = core_kinds(r, cpu_dir, online)
    _place_offline(cpus - online, levels, numa_of)
    infos = [CPUInfo(cpu=c, socket=levels.socket[c], core=levels.core[c], numa=numa_of[c], l3=levels.l3[c],
                     die=levels.die[c], online=c in online, isolated=c in isolated,
                     cluster=levels.cluster.get(c, 0), kind=kinds.get(c, ""))
             for c in cpus]
    cpu_nodes = set(numa_of.values())
    memory_only = tuple(n for n in numa.nodes if n not in cpu_nodes)
    try:
        topo = Topology(cpus=tuple(infos), numa_distances=numa.distances, numa_memory_bytes=numa.memory,
                        memory_only_nodes=memory_only)
    except TopologyError as exc:  # a bug here, not in the tree: every repair above keeps the model valid
        raise SysfsError(f"inconsistent topology under {r.system}: {exc}") from exc
    sources = dict(levels.sources)
    if kind_source:
        sources["core kinds"] = kind_source
    return Discovery(topo, tuple(r.warnings), sources, r.files_read)


def _online(r: Reader, cpu_dir: Path, cpus: CPUSet) -> CPUSet:
    online = r.cpulist(cpu_dir / "online")
    if online is not None:
        return online
    offline = r.cpulist(cpu_dir / "offline")
    if offline is not None:
        r.warn(f"{cpu_dir}/online missing: using the CPUs minus cpu/offline")
        return cpus - offline
    r.warn(f"{cpu_dir}/online missing: each cpuN/online decides (no file: online)")
    return CPUSet(c for c in cpus if r.int(cpu_dir / f"cpu{c}" / "online") != 0)


def _with_topology(r: Reader, cpu_dir: Path, online: CPUSet) -> CPUSet:
    without = CPUSet(c for c in online if not r.isdir(cpu_dir / f"cpu{c}" / "topology"))
    if not without:
        return online
    if without == online:
        r.warn(f"no CPU has a topology directory: CPUs {online} are each their own core")
        return online
    r.warn(f"online CPUs {without} have no topology directory: treated as offline (as hwloc does)")
    return online - without


def _numa_of(r: Reader, cpu_dir: Path, cpus: CPUSet, online: CPUSet, claimed: dict[int, int],
             nodes: list[int], levels: Levels) -> dict[int, int]:
    if not nodes:
        return dict.fromkeys(cpus, 0)
    numa_of = dict(claimed)
    unknown: list[int] = []
    for c in cpus - CPUSet(numa_of):
        link = cpu_node_link(r, cpu_dir, c)
        if link is not None and link in nodes:
            numa_of[c] = link
        else:
            unknown.append(c)
    if unknown:  # online ones: their core's node, else the lowest node holding CPUs
        first = min((numa_of[c] for c in numa_of), default=nodes[0])
        for c in sorted(unknown):
            peers = [numa_of[o] for o in levels.core_sets.get(c, CPUSet()) if o in numa_of]
            numa_of[c] = peers[0] if peers else first
        r.warn(f"NUMA node unknown for CPUs {CPUSet(unknown)}: placed with their core or on node {first}")
    split: list[CPUSet] = []
    for members in {s for c, s in levels.core_sets.items() if c in online}:
        home = numa_of[members.min()]
        if any(numa_of[o] != home for o in members):
            split.append(members)
            numa_of.update(dict.fromkeys(members, home))
    for members in sorted(split, key=lambda s: s.min()):
        r.warn(f"SMT siblings {members} span NUMA nodes: all placed on node {numa_of[members.min()]}")
    return {c: numa_of[c] for c in cpus}


def _place_offline(offline: CPUSet, levels: Levels, numa_of: dict[int, int]) -> None:
    """Offline CPUs: socket/die of most CPUs of their node, a core of their own, the node's lowest L3."""
    for c in offline:
        peers = [o for o in levels.socket if numa_of[o] == numa_of[c]]
        place = Counter((levels.socket[o], levels.die[o]) for o in peers).most_common(1)
        socket, die = place[0][0] if place else (min(levels.socket.values(), default=0), 0)
        levels.socket[c], levels.die[c] = socket, die
        levels.core[c] = 1 + max((k for o, k in levels.core.items() if levels.socket[o] == socket), default=-1)
        l3s = [levels.l3[o] for o in peers if o in levels.l3]
        levels.l3[c] = min(l3s) if l3s else min(levels.l3.values(), default=socket)
