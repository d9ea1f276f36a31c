"""Discover the host's CPU topology from a sysfs tree (``<root>/sys/devices/system``).

Reads files only, so tests point ``root`` at captured or generated trees. Missing
pieces degrade with one warning per kind (partial sysfs in containers, kernels
without cache info); content that cannot be parsed raises ``SysfsError`` naming
the file.

Choices worth knowing:

* The CPUs considered are the *present* ones (``cpu/present``, else the ``cpuN``
  directories). ``cpu/offline`` is possible-minus-online, so on VMs it lists
  CPUs that do not exist; offline = present - online.
* SMT siblings come from ``core_cpus_list`` (or the older ``thread_siblings_list``),
  cross-checked with ``(package, die, core_id)``. If the two disagree, or core_id
  repeats across dies of a package, cores are renumbered from the sibling lists.
* An offline CPU usually has no ``topology``/``cache`` dirs. It stays in the
  topology (online=False): its NUMA node comes from the ``cpuN/nodeM`` link or a
  node cpulist; socket and die are those of most CPUs of that node; it gets a
  fresh core id (its own single-thread core) and the lowest L3 group of its node.
* L3 ids are sysfs cache ``id`` values when they are unique across sockets;
  otherwise (or with no ``id`` file) groups are renumbered 0.. by lowest CPU.
* NUMA nodes without CPUs are ignored (with a warning): the engine places CPUs.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..cpuset import EMPTY, CPUSet, CPUSetError
from .model import CPUInfo, Topology, TopologyError

log = logging.getLogger(__name__)

_CPU_DIR = re.compile(r"cpu(\d+)")
_NODE_DIR = re.compile(r"node(\d+)")
_CACHE_DIR = re.compile(r"index\d+")
_MEMTOTAL = re.compile(r"^Node\s+\d+\s+MemTotal:\s+(\d+)\s+kB\s*$", re.MULTILINE)


class SysfsError(ValueError):
    """A sysfs file (named in the message) whose content makes no sense."""


@dataclass(frozen=True)
class Discovery:
    topology: Topology
    warnings: tuple[str, ...]


def discover(root: str | Path = "/") -> Topology:
    """The topology under ``root``; degradations are logged as warnings."""
    found = discover_with_warnings(root)
    for message in found.warnings:
        log.warning("sysfs: %s", message)
    return found.topology


def discover_with_warnings(root: str | Path = "/") -> Discovery:
    return _Discoverer(Path(root)).run()


@dataclass
class _Placement:
    socket: int
    die: int
    core_id: int | None
    siblings: CPUSet | None  # online siblings per sysfs, including the CPU itself


class _Discoverer:
    def __init__(self, root: Path) -> None:
        self.base = root / "sys" / "devices" / "system"
        self.cpu_dir = self.base / "cpu"
        self.node_dir = self.base / "node"
        self.warnings: list[str] = []

    # -- file helpers ------------------------------------------------------
    def _text(self, path: Path) -> str | None:
        try:
            return path.read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise SysfsError(f"cannot read {path}: {exc}") from exc

    def _int(self, path: Path) -> int | None:
        text = self._text(path)
        if text is None:
            return None
        try:
            return int(text.strip())
        except ValueError:
            raise SysfsError(f"{path}: expected an integer, got {text.strip()[:40]!r}") from None

    def _cpus(self, path: Path) -> CPUSet | None:
        text = self._text(path)
        if text is None:
            return None
        try:
            return CPUSet.parse(text)
        except CPUSetError as exc:
            raise SysfsError(f"{path}: {exc}") from None

    def _warn(self, message: str) -> None:
        self.warnings.append(message)

    # -- the walk ----------------------------------------------------------
    def run(self) -> Discovery:
        if not self.cpu_dir.is_dir():
            raise SysfsError(f"no CPU directory at {self.cpu_dir}")
        cpus, online = self._cpu_sets()
        isolated = self._cpus(self.cpu_dir / "isolated")
        if isolated is None:
            self._warn(f"{self.cpu_dir / 'isolated'} missing: assuming no isolated CPUs")
            isolated = EMPTY
        numa_of, nodes = self._numa(cpus)
        placement = self._placements(cpus, online)
        cores = self._cores(placement, online)
        self._place_orphans(cpus, placement, cores, numa_of)
        l3 = self._l3(cpus, online, placement, numa_of)
        infos = [
            CPUInfo(cpu=c, socket=placement[c].socket, core=cores[c], numa=numa_of[c], l3=l3[c],
                    die=placement[c].die, online=c in online, isolated=c in isolated)
            for c in cpus
        ]
        cpu_nodes = sorted(set(numa_of.values()))
        distances = self._distances(nodes, cpu_nodes)
        memory = self._memory(cpu_nodes)
        try:
            topo = Topology(cpus=tuple(infos), numa_distances=distances, numa_memory_bytes=memory)
        except TopologyError as exc:
            raise SysfsError(f"inconsistent topology under {self.base}: {exc}") from exc
        return Discovery(topo, tuple(self.warnings))

    def _cpu_sets(self) -> tuple[CPUSet, CPUSet]:
        listed = CPUSet(int(m.group(1)) for e in _listdir(self.cpu_dir) if (m := _CPU_DIR.fullmatch(e)))
        present = self._cpus(self.cpu_dir / "present")
        online = self._cpus(self.cpu_dir / "online")
        offline = self._cpus(self.cpu_dir / "offline")
        if online is not None and offline is not None and online & offline:
            raise SysfsError(f"{self.cpu_dir}/online and offline both list CPUs {online & offline}")
        cpus = present if present is not None else listed | (online or EMPTY)
        if online is None:
            if offline is None:
                self._warn(f"{self.cpu_dir}/online and offline missing: assuming all CPUs online")
                offline = EMPTY
            else:
                self._warn(f"{self.cpu_dir}/online missing: using present minus offline")
            online = cpus - offline
        if not online:
            raise SysfsError(f"no online CPUs under {self.cpu_dir}")
        if not online.issubset(cpus):
            raise SysfsError(f"{self.cpu_dir}/online lists CPUs {online - cpus} that are not present")
        return cpus, online

    def _numa(self, cpus: CPUSet) -> tuple[dict[int, int], list[int]]:
        """CPU -> NUMA node, and every node directory (CPU-less ones too)."""
        nodes = sorted(int(m.group(1)) for e in _listdir(self.node_dir) if (m := _NODE_DIR.fullmatch(e)))
        if not nodes:
            self._warn(f"no NUMA node directories under {self.node_dir}: one NUMA node 0 with all CPUs")
            return {c: 0 for c in cpus}, []
        numa_of: dict[int, int] = {}
        for n in nodes:
            path = self.node_dir / f"node{n}" / "cpulist"
            for c in self._cpus(path) or EMPTY:
                if c in numa_of:
                    raise SysfsError(f"{path}: CPU {c} also belongs to node{numa_of[c]}")
                numa_of[c] = n
        unknown: list[int] = []
        for c in cpus - CPUSet(numa_of):
            links = [int(m.group(1)) for e in _listdir(self.cpu_dir / f"cpu{c}")
                     if (m := _NODE_DIR.fullmatch(e))]
            if len(links) == 1:
                numa_of[c] = links[0]
            else:
                unknown.append(c)
                numa_of[c] = nodes[0]
        if unknown:
            self._warn(f"NUMA node unknown for CPUs {CPUSet(unknown)}: placed on node {nodes[0]}")
        cpuless = sorted(set(nodes) - {numa_of[c] for c in cpus})
        if cpuless:
            self._warn(f"NUMA node(s) {cpuless} have no CPUs: ignored")
        return {c: numa_of[c] for c in cpus}, nodes

    def _placements(self, cpus: CPUSet, online: CPUSet) -> dict[int, _Placement]:
        placement: dict[int, _Placement] = {}
        no_topology: list[int] = []
        no_package: list[int] = []
        for c in cpus:
            tdir = self.cpu_dir / f"cpu{c}" / "topology"
            if not tdir.is_dir():
                if c in online:
                    no_topology.append(c)
                continue
            socket = self._int(tdir / "physical_package_id")
            if socket is None or socket < 0:  # -1: firmware did not say
                no_package.append(c)
                socket = 0
            die = self._int(tdir / "die_id")
            siblings = self._cpus(tdir / "core_cpus_list")
            older = self._cpus(tdir / "thread_siblings_list")
            if siblings is not None and older is not None and siblings != older:
                raise SysfsError(f"{tdir}: core_cpus_list {siblings} differs from "
                                 f"thread_siblings_list {older}")
            siblings = siblings if siblings is not None else older
            if siblings is not None and c in online and c not in siblings:
                raise SysfsError(f"{tdir}: sibling list {siblings} does not include CPU {c} itself")
            placement[c] = _Placement(socket, max(die or 0, 0), self._int(tdir / "core_id"), siblings)
        if no_topology:
            self._warn(f"no topology directory for online CPUs {CPUSet(no_topology)}: "
                       "each becomes its own core")
        if no_package:
            self._warn(f"no physical_package_id for CPUs {CPUSet(no_package)}: socket 0 assumed")
        return placement

    def _cores(self, placement: dict[int, _Placement], online: CPUSet) -> dict[int, int]:
        """Core id (unique within socket) for every CPU that has a placement."""
        groups = _sibling_groups(placement, online)
        by_key: dict[tuple[int, int, int], list[int]] = {}
        for c, p in placement.items():
            if p.core_id is not None:
                by_key.setdefault((p.socket, p.die, p.core_id), []).append(c)
        key_groups = {CPUSet(v) & online for v in by_key.values()} - {EMPTY}
        have_ids = all(p.core_id is not None for p in placement.values())
        per_socket = Counter((s, core) for s, _d, core in by_key)
        if have_ids and (groups is None or groups == key_groups) and max(per_socket.values(), default=1) == 1:
            return {c: p.core_id for c, p in placement.items() if p.core_id is not None}
        if groups is None:
            groups = key_groups if have_ids else {CPUSet([c]) for c in placement if c in online}
        if have_ids and groups != key_groups:
            self._warn("core_id does not match the SMT sibling lists: cores taken from the sibling lists")
        elif have_ids:
            self._warn("core_id repeats across dies of a package: cores renumbered per socket")
        else:
            self._warn("core_id missing: cores taken from the SMT sibling lists")
        return _renumber_cores(groups, placement)

    def _place_orphans(self, cpus: CPUSet, placement: dict[int, _Placement],
                       cores: dict[int, int], numa_of: dict[int, int]) -> None:
        """Give CPUs without a topology dir the socket/die of their node and a core of their own."""
        for c in cpus:
            if c in placement and c in cores:
                continue
            peers = [placement[o] for o in cpus if o in placement and numa_of[o] == numa_of[c]]
            socket, die = Counter((p.socket, p.die) for p in peers).most_common(1)[0][0] if peers else (0, 0)
            if c not in placement:
                placement[c] = _Placement(socket, die, None, None)
            socket = placement[c].socket
            cores[c] = 1 + max((cores[o] for o in cores if placement[o].socket == socket), default=-1)

    def _l3(self, cpus: CPUSet, online: CPUSet, placement: dict[int, _Placement],
            numa_of: dict[int, int]) -> dict[int, int]:
        keys: dict[int, tuple[str, int]] = {}  # ("id", raw id) | ("shared", mask) | ("socket", socket)
        raw_socket: dict[int, set[int]] = {}
        no_l3: list[int] = []
        no_id = False
        for c in cpus:
            found = self._l3_of(c)
            if found is None:
                if c in online:
                    no_l3.append(c)
                    keys[c] = ("socket", placement[c].socket)
                continue
            raw_id, shared = found
            if raw_id is None:
                no_id = True
                keys[c] = ("shared", (shared | CPUSet([c])).mask)
            else:
                keys[c] = ("id", raw_id)
                raw_socket.setdefault(raw_id, set()).add(placement[c].socket)
        if no_l3:
            self._warn(f"no L3 cache info for CPUs {CPUSet(no_l3)}: their socket is their L3 group")
        if no_id:
            self._warn("L3 cache without an id file: groups numbered from shared_cpu_list")
        kinds = {k for k, _v in keys.values()}
        ids_unique = all(len(s) == 1 for s in raw_socket.values())
        if kinds == {"socket"} or (kinds == {"id"} and ids_unique):  # keep the kernel's numbers
            l3 = {c: v for c, (_k, v) in keys.items()}
        else:  # mixed or colliding: (kind, value, socket) groups numbered by their lowest CPU
            full = {c: (*k, placement[c].socket) for c, k in keys.items()}
            first: dict[tuple[str, int, int], int] = {}
            for c in sorted(full):
                first.setdefault(full[c], len(first))
            l3 = {c: first[full[c]] for c in full}
        for c in cpus:  # offline CPUs without cache info: the lowest L3 of their node
            if c not in l3:
                same_node = [l3[o] for o in l3 if numa_of[o] == numa_of[c]]
                l3[c] = min(same_node) if same_node else placement[c].socket
        return l3

    def _l3_of(self, cpu: int) -> tuple[int | None, CPUSet] | None:
        cache = self.cpu_dir / f"cpu{cpu}" / "cache"
        for entry in sorted(e for e in _listdir(cache) if _CACHE_DIR.fullmatch(e)):
            if self._int(cache / entry / "level") == 3:
                shared = self._cpus(cache / entry / "shared_cpu_list")
                return self._int(cache / entry / "id"), shared or CPUSet([cpu])
        return None

    def _distances(self, nodes: list[int], cpu_nodes: list[int]) -> dict[int, dict[int, int]]:
        rows: dict[int, dict[int, int]] = {}
        missing: list[int] = []
        online_nodes = self._cpus(self.node_dir / "online")  # one column per online node, ascending
        columns = sorted(online_nodes) if online_nodes else nodes
        for n in cpu_nodes if nodes else []:
            path = self.node_dir / f"node{n}" / "distance"
            text = self._text(path)
            if text is None:
                missing.append(n)
                continue
            try:
                values = [int(v) for v in text.split()]
            except ValueError:
                raise SysfsError(f"{path}: expected integers, got {text.strip()[:60]!r}") from None
            if len(values) != len(columns):
                raise SysfsError(f"{path}: {len(values)} distances for {len(columns)} NUMA nodes {columns}")
            row = dict(zip(columns, values, strict=True))
            if any(m not in row for m in cpu_nodes):
                raise SysfsError(f"{path}: no distance to node(s) {sorted(set(cpu_nodes) - set(row))}")
            rows[n] = {m: row[m] for m in cpu_nodes}
        if missing:
            self._warn(f"NUMA distance missing for node(s) {missing}: using 10 local / 20 remote")
            return {}
        return rows

    def _memory(self, cpu_nodes: list[int]) -> dict[int, int]:
        memory: dict[int, int] = {}
        missing: list[int] = []
        for n in cpu_nodes:
            path = self.node_dir / f"node{n}" / "meminfo"
            text = self._text(path)
            if text is None:
                missing.append(n)
                continue
            match = _MEMTOTAL.search(text)
            if match is None:
                raise SysfsError(f"{path}: no 'Node {n} MemTotal: <N> kB' line")
            memory[n] = int(match.group(1)) * 1024
        if missing and self.node_dir.is_dir():
            self._warn(f"meminfo missing for NUMA node(s) {missing}: memory size unknown")
        return memory


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise SysfsError(f"cannot list {path}: {exc}") from exc


def _sibling_groups(placement: dict[int, _Placement], online: CPUSet) -> set[CPUSet] | None:
    """Partition of online CPUs into cores by the sibling lists (None if no CPU has them)."""
    known = online & CPUSet(placement)
    lists = {c: p.siblings & known for c, p in placement.items() if c in known and p.siblings is not None}
    if not lists:
        return None
    for c, sibs in lists.items():
        for other in sibs:
            if other in lists and lists[other] != sibs:
                raise SysfsError(f"cpu{c} and cpu{other} disagree on their SMT siblings "
                                 f"({sibs} vs {lists[other]})")
            if placement[other].socket != placement[c].socket:
                raise SysfsError(f"SMT siblings cpu{c} and cpu{other} are on different packages")
    missing = [c for c in online if c in placement and c not in lists]
    return set(lists.values()) | {CPUSet([c]) for c in missing}


def _renumber_cores(groups: Iterable[CPUSet], placement: dict[int, _Placement]) -> dict[int, int]:
    """Number cores 0.. within each socket, ordered by (die, core_id, lowest CPU)."""
    by_socket: dict[int, list[tuple[int, int, int, CPUSet]]] = {}
    for g in groups:
        p = placement[g.min()]
        by_socket.setdefault(p.socket, []).append((p.die, p.core_id or 0, g.min(), g))
    cores: dict[int, int] = {}
    for entries in by_socket.values():
        for index, (*_order, group) in enumerate(sorted(entries, key=lambda e: e[:3])):
            for c in group:
                cores[c] = index
    # offline CPUs that kept their topology dir join the online core with the same key
    by_key = {(p.socket, p.die, p.core_id): cores[c] for c, p in placement.items() if c in cores}
    for c, p in placement.items():
        if c not in cores and p.core_id is not None and (p.socket, p.die, p.core_id) in by_key:
            cores[c] = by_key[(p.socket, p.die, p.core_id)]
    return cores
