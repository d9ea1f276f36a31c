"""Partitions of the online CPUs read from sysfs: cores, packages, dies, clusters, L3 groups.

Follows hwloc's Linux reader: a level's groups come from the *set* files
(``core_cpus``/``thread_siblings``, ``package_cpus``/``core_siblings``, ``die_cpus``,
``cluster_cpus``, ``cache/indexN/shared_cpu_map``; the hex mask, else its ``*_list``
twin), intersected with the online CPUs, and only the first CPU of a
group is read (its set names the others). Ids (``core_id``, ``physical_package_id``,
``die_id``, cache ``id``) only label groups; when they are missing, -1 or repeated,
groups are numbered by their lowest CPU and the repair is reported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..cpuset import CPUSet
from .sysfs_read import Reader

Group = tuple[int, CPUSet]  # (lowest CPU, members)


@dataclass
class Level:
    """CPU -> group number, and which sysfs source the grouping came from."""

    of: dict[int, int]
    source: str


def partition(r: Reader, online: CPUSet, read: Callable[[int], CPUSet | None],
              regroup: Callable[[int], int | None] | None = None) -> list[Group] | None:
    """Groups from per-CPU set files; None when the first CPU has no such file at all.

    A set (cut to the online CPUs) makes a group only when its CPU is the lowest member and it
    overlaps no group made before: hwloc's rule (topology-linux.c of 2.9.0, lines 4611 core, 4710
    package, 4865 cache: an object only from the first CPU of its set; topology.c:1527: a set
    intersecting an earlier one is refused). hwloc leaves the other CPUs outside that level; the
    model places every CPU, so those are grouped by ``regroup`` (an id file) when it gives a
    valid id, else each CPU is a group of its own.
    """
    groups: list[Group] = []
    taken = CPUSet()
    absent: list[int] = []
    outside: list[int] = []  # CPUs missing from their own set
    left: list[int] = []
    for c in online:
        if c in taken:
            continue
        members = read(c)
        if members is None:
            if not groups:
                return None
            absent.append(c)
            members = CPUSet([c])
        members = members & online
        if c not in members or members.min() != c or members & taken:
            (left if c in members else outside).append(c)
            continue
        groups.append((c, members))
        taken = taken | members
    if absent:
        r.warn(f"CPUs {CPUSet(absent)} have no set file: each starts a group of its own")
    if outside or left:
        groups.extend(_regroup(r, CPUSet(outside), CPUSet(left), regroup))
    return sorted(groups, key=lambda g: g[0])


def _regroup(r: Reader, outside: CPUSet, left: CPUSet, regroup: Callable[[int], int | None] | None) -> list[Group]:
    """The CPUs hwloc leaves outside a level: by their id file when valid, else one group each."""
    why = [f"CPUs {outside} missing from their own set files"] if outside else []
    why += [f"sets of CPUs {left} start at a lower CPU or overlap an earlier group"] if left else []
    keyed: dict[int, list[int]] = {}
    for c in outside | left:
        i = regroup(c) if regroup is not None else None
        keyed.setdefault(i if i is not None and i >= 0 else -1 - c, []).append(c)
    how = "grouped by their id file" if any(len(v) > 1 for v in keyed.values()) else "each starts a group of its own"
    r.warn(f"{'; '.join(why)} (hwloc leaves them out of the level): {how}")
    return [(min(v), CPUSet(v)) for v in keyed.values()]


def number(r: Reader, groups: list[Group], ids: dict[int, int | None], what: str, source: str,
           scope: Callable[[int], int] | None = None, id_file: str = "") -> Level:
    """Label groups with their sysfs ids when those are valid and unique (within ``scope``)."""
    keys = [(scope(first) if scope else 0, ids.get(first)) for first, _ in groups]
    valid = all(i is not None and i >= 0 for _, i in keys) and len(set(keys)) == len(keys)
    of: dict[int, int] = {}
    if valid:
        for (_first, members), (_, i) in zip(groups, keys, strict=True):
            assert i is not None
            of.update(dict.fromkeys(members, i))
        return Level(of, source)
    counters: dict[int, int] = {}
    for first, members in groups:
        s = scope(first) if scope else 0
        of.update(dict.fromkeys(members, counters.setdefault(s, 0)))
        counters[s] += 1
    bad = [str(i) for i in sorted({i for _, i in keys if i is not None and i < 0})] or ["missing or repeated"]
    r.warn(f"{id_file or what + '_id'} {bad[0]}: {what}s taken from {source}, numbered by lowest CPU")
    return Level(of, source + " (renumbered)")


def by_id(online: CPUSet, read_id: Callable[[int], int | None]) -> list[Group]:
    """Groups of CPUs sharing an id file value (the fallback when set files are absent)."""
    members: dict[int | None, list[int]] = {}
    for c in online:
        members.setdefault(read_id(c), []).append(c)
    return sorted((min(v), CPUSet(v)) for v in members.values())


def topo_sets(r: Reader, cpu_dir: Path, new: str, old: str | None) -> Callable[[int], CPUSet | None]:
    def read(c: int) -> CPUSet | None:
        d = cpu_dir / f"cpu{c}" / "topology"
        found = r.cpus(d, new)
        if found is None and old is not None:
            found = r.cpus(d, old)
        return found
    return read


def topo_id(r: Reader, cpu_dir: Path, name: str) -> Callable[[int], int | None]:
    return lambda c: r.int(cpu_dir / f"cpu{c}" / "topology" / name)


@dataclass
class L3:
    of: dict[int, int]  # online CPUs with L3 info -> group number
    source: str


class L3Finder:
    """The level-3 unified cache of each CPU; remembers which indexN held it to read less."""

    def __init__(self, r: Reader, cpu_dir: Path) -> None:
        self.r, self.cpu_dir = r, cpu_dir
        self.guess: str | None = None

    def find(self, cpu: int) -> tuple[Path, CPUSet] | None:
        cache = self.cpu_dir / f"cpu{cpu}" / "cache"
        names = [self.guess] if self.guess else []
        for name in names + sorted(e for e in self.r.listdir(cache) if e.startswith("index")):
            d = cache / name
            if self.r.int(d / "level") != 3:
                continue
            kind = self.r.text(d / "type")
            if kind is not None and not kind.startswith("Unified"):
                continue
            shared = self.r.cpumask(d / "shared_cpu_map")  # hwloc's source
            if shared is None:
                shared = self.r.cpulist(d / "shared_cpu_list")
            if not shared:  # ia64 reports empty L3 maps: hwloc then uses the core's set
                shared = CPUSet([cpu])
            self.guess = name
            return d, shared
        return None


def l3_groups(r: Reader, cpu_dir: Path, online: CPUSet, socket_of: dict[int, int],
              core_groups: dict[int, CPUSet]) -> L3:
    finder = L3Finder(r, cpu_dir)
    groups: list[Group] = []
    ids: dict[int, int | None] = {}
    taken = CPUSet()
    missing: list[int] = []
    refused: list[int] = []  # partition()'s rule: the set starts at a lower CPU or overlaps a group
    for c in online:
        if c in taken:
            continue
        found = finder.find(c)
        if found is None:
            missing.append(c)
            continue
        d, shared = found
        members = (shared | core_groups.get(c, CPUSet([c]))) & online | CPUSet([c])
        if members.min() != c or members & taken:
            refused.append(c)
            continue
        groups.append((c, members))
        ids[c] = r.int(d / "id")
        taken = taken | members
    of: dict[int, int] = {}
    source = "cache id"
    if groups:
        have_ids = all(i is not None for i in ids.values())
        unique = len({ids[f] for f, _ in groups}) == len(groups)
        if have_ids and unique:
            of = {c: ids[f] or 0 for f, m in groups for c in m}
        else:
            if not have_ids:
                r.warn("L3 cache without an id file: groups taken from shared_cpu_list/shared_cpu_map")
            of = {c: i for i, (_f, m) in enumerate(groups) for c in m}
            source = "shared_cpu_list/map"
    if refused:
        r.warn(f"L3 sets of CPUs {CPUSet(refused)} start at a lower CPU or overlap an earlier group "
               "(hwloc leaves them without an L3): their socket is their L3 group")
    if missing:
        r.warn(f"no L3 cache info for CPUs {CPUSet(missing)}: their socket is their L3 group")
    missing = sorted(missing + refused)
    if missing:  # the socket is the L3 group (kept apart from real groups)
        if not groups:
            return L3({c: socket_of[c] for c in missing}, "socket")
        base = max(of.values()) + 1
        sockets = sorted({socket_of[c] for c in missing})
        of.update({c: base + sockets.index(socket_of[c]) for c in missing})
        source += " + socket"
    return L3(of, source)
