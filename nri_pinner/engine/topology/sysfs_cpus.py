"""Per-CPU placement of the online CPUs: package, die, cluster, core and L3 group.

Packages come from ``package_cpus``/``core_siblings`` (hwloc's source), labelled by
``physical_package_id`` unless it is -1 or repeats across packages (s390 books and
drawers, some POWER and virtual machines): then packages are numbered by lowest
CPU and ``sources["packages"]`` says so. Without set files, ``physical_package_id``
groups the CPUs. Cores, dies and clusters work the same way; core numbers must be
unique within a socket (the model's rule), dies within a socket, clusters and L3
groups machine-wide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..cpuset import CPUSet
from .sysfs_groups import Group, Level, by_id, l3_groups, number, partition, topo_id, topo_sets
from .sysfs_read import Reader


@dataclass
class Levels:
    socket: dict[int, int]
    die: dict[int, int]
    core: dict[int, int]
    l3: dict[int, int]
    cluster: dict[int, int]
    core_sets: dict[int, CPUSet]  # online CPU -> its core's online CPUs
    sources: dict[str, str] = field(default_factory=dict)


def read_levels(r: Reader, cpu_dir: Path, online: CPUSet) -> Levels:
    sources: dict[str, str] = {}
    pkg = _packages(r, cpu_dir, online)
    sources["packages"] = pkg.source
    socket = pkg.of
    die = _dies(r, cpu_dir, online, socket)
    sources["dies"] = die.source
    cores, core_source = _cores(r, cpu_dir, online, socket, die.of)
    sources["cores"] = core_source
    core_sets: dict[int, CPUSet] = {}
    for members in _members(cores.of, key=lambda c: (socket[c], cores.of[c])):
        core_sets.update(dict.fromkeys(members, members))
    cluster = _clusters(r, cpu_dir, online)
    if cluster.source:
        sources["clusters"] = cluster.source
    l3 = l3_groups(r, cpu_dir, online, socket, core_sets)
    sources["L3"] = l3.source
    return Levels(dict(socket), dict(die.of), dict(cores.of), dict(l3.of), dict(cluster.of), core_sets,
                  sources)


def _members(of: dict[int, int], key: object) -> list[CPUSet]:
    out: dict[object, list[int]] = {}
    for c in of:
        out.setdefault(key(c), []).append(c)  # type: ignore[operator]
    return [CPUSet(v) for v in out.values()]


def _packages(r: Reader, cpu_dir: Path, online: CPUSet) -> Level:
    read_id = topo_id(r, cpu_dir, "physical_package_id")
    groups = partition(r, online, topo_sets(r, cpu_dir, "package_cpus", "core_siblings"), regroup=read_id)
    if groups is not None:
        ids = {first: read_id(first) for first, _ in groups}
        return number(r, groups, ids, "package", "package_cpus/core_siblings", id_file="physical_package_id")
    ids_of = {c: read_id(c) for c in online}
    if all(v is not None and v >= 0 for v in ids_of.values()):
        r.warn("no package_cpus/core_siblings files: packages grouped by physical_package_id")
        return number(r, by_id(online, ids_of.get), {c: ids_of[c] for c in online}, "package",
                      "physical_package_id", id_file="physical_package_id")
    r.warn("no package_cpus/core_siblings and no usable physical_package_id: one package 0")
    return Level(dict.fromkeys(online, 0), "none")


def _dies(r: Reader, cpu_dir: Path, online: CPUSet, socket: dict[int, int]) -> Level:
    groups = partition(r, online, topo_sets(r, cpu_dir, "die_cpus", None))
    read_id = topo_id(r, cpu_dir, "die_id")
    if groups is None:
        first = read_id(online.min())
        if first is None:  # kernels before 5.2: no dies
            return Level(dict.fromkeys(online, 0), "none")
        ids_of = {c: read_id(c) for c in online}
        groups = by_id(online, lambda c: (socket[c] << 20) + max(ids_of[c] or 0, 0))
        ids = {f: ids_of[f] for f, _ in groups}
        source = "die_id"
    else:
        ids = {f: read_id(f) for f, _ in groups}
        source = "die_cpus"
    groups = _split_by(r, groups, socket, "die")  # a die never spans packages
    no_ids = all(ids.get(f) is None or ids.get(f) == -1 for f, _ in groups)
    if no_ids and all(len(m) == 1 for _f, m in groups) and len(online) > 1:  # arm64 defaults: no dies
        return Level(dict.fromkeys(online, 0), "none")
    if all(i is None or i == -1 for i in ids.values()):
        ids = {f: 0 for f, _ in groups} if len(groups) == len({socket[f] for f, _ in groups}) else ids
    return number(r, groups, {f: ids.get(f) for f, _ in groups}, "die", source, scope=socket.__getitem__)


def _cores(r: Reader, cpu_dir: Path, online: CPUSet, socket: dict[int, int],
           die: dict[int, int]) -> tuple[Level, str]:
    groups = partition(r, online, topo_sets(r, cpu_dir, "core_cpus", "thread_siblings"))
    read_id = topo_id(r, cpu_dir, "core_id")
    source = "core_cpus/thread_siblings"
    if groups is None:
        ids_of = {c: read_id(c) for c in online}
        if any(v is None for v in ids_of.values()):
            r.warn("no SMT sibling files and no core_id: every online CPU is a core of its own")
            groups, source = [(c, CPUSet([c])) for c in online], "none"
        else:
            r.warn("no SMT sibling files: cores grouped by (package, die, core_id)")
            keyed = {c: (socket[c], die[c], ids_of[c]) for c in online}
            rank = {k: i for i, k in enumerate(sorted(set(keyed.values()), key=str))}
            groups, source = by_id(online, lambda c: rank[keyed[c]]), "core_id"
    groups = _split_by(r, groups, socket, "core")
    multi = next((m for _f, m in groups if len(m) > 1), None)
    if multi is not None and source != "core_id" and read_id(multi.sorted()[0]) != read_id(multi.sorted()[1]):
        # AMD compute units (Bulldozer): the sibling set is a module of cores with their own core_id
        r.warn(f"SMT sibling set {multi} holds different core_id values (compute units): one core per CPU")
        groups, source = [(c, CPUSet([c])) for c in online], "core_id (compute units)"
    ids = {f: read_id(f) for f, _ in groups} if source != "none" else {}
    keys = [(socket[f], ids.get(f)) for f, _ in groups]
    if ids and all(i is not None and i >= 0 for _, i in keys) and len(set(keys)) == len(keys):
        return Level({c: ids[f] or 0 for f, m in groups for c in m}, source), source
    if ids and all(i is not None and i >= 0 for _, i in keys):
        r.warn("core_id repeats within a package (dies): cores renumbered per socket")
    elif ids:
        r.warn("core_id missing or -1: cores numbered per socket from the SMT sibling sets")
    # number within each socket by (die, core_id, lowest CPU), as sysfs would have
    order = sorted(groups, key=lambda g: (socket[g[0]], die[g[0]], ids.get(g[0]) or 0, g[0]))
    counters: dict[int, int] = {}
    of: dict[int, int] = {}
    for first, members in order:
        s = socket[first]
        of.update(dict.fromkeys(members, counters.setdefault(s, 0)))
        counters[s] += 1
    return Level(of, source), source + " (renumbered)"


def _clusters(r: Reader, cpu_dir: Path, online: CPUSet) -> Level:
    groups = partition(r, online, topo_sets(r, cpu_dir, "cluster_cpus", None))
    if groups is None:
        return Level({}, "")
    return Level({c: i for i, (_f, m) in enumerate(groups) for c in m}, "cluster_cpus")


def _split_by(r: Reader, groups: list[Group], socket: dict[int, int], what: str) -> list[Group]:
    """Cut groups that span packages (firmware bug) so each stays inside one package."""
    out: list[Group] = []
    for _first, members in groups:
        parts: dict[int, list[int]] = {}
        for c in members:
            parts.setdefault(socket[c], []).append(c)
        if len(parts) > 1:
            r.warn(f"{what} {members} spans packages {sorted(parts)}: split per package")
        out.extend((min(v), CPUSet(v)) for v in parts.values())
    return sorted(out, key=lambda g: g[0])
