"""The host's CPU topology as plain data, with precomputed CPU sets per level.

Built either from sysfs (``sysfs.discover``) or from the JSON shape that
``nri-pinner topology --json`` prints and ``simulate`` reads. Pure data: no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..cpuset import EMPTY, CPUSet


class TopologyError(ValueError):
    """A topology description that is inconsistent or incomplete."""


@dataclass(frozen=True, slots=True)
class CPUInfo:
    cpu: int
    socket: int
    core: int  # physical core id, unique within its socket (as sysfs core_id)
    numa: int
    l3: int  # last-level (uncore) cache id, unique on the machine
    die: int = 0
    online: bool = True
    isolated: bool = False
    cluster: int = 0  # cluster group (arm64 clusters, x86 L2 modules), machine-wide; 0 if unknown
    kind: str = ""  # core kind on hybrid CPUs ("P"/"E", "big"/"little"); "" on uniform machines


@dataclass(frozen=True)
class Topology:
    """CPUs plus NUMA facts. ``core_ids`` are machine-wide: one per (socket, core)."""

    cpus: tuple[CPUInfo, ...]
    numa_distances: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    numa_memory_bytes: Mapping[int, int] = field(default_factory=dict)
    # NUMA nodes without CPUs (memory-only: CXL, HBM, offline CPUs' nodes): valid cpuset.mems targets
    memory_only_nodes: tuple[int, ...] = ()

    # derived, filled in __post_init__
    by_cpu: Mapping[int, CPUInfo] = field(init=False, repr=False, compare=False)
    core_of: Mapping[int, int] = field(init=False, repr=False, compare=False)
    all_cpus: CPUSet = field(init=False, repr=False, compare=False)
    online: CPUSet = field(init=False, repr=False, compare=False)
    isolated: CPUSet = field(init=False, repr=False, compare=False)
    socket_cpus: Mapping[int, CPUSet] = field(init=False, repr=False, compare=False)
    numa_cpus: Mapping[int, CPUSet] = field(init=False, repr=False, compare=False)
    core_cpus: Mapping[int, CPUSet] = field(init=False, repr=False, compare=False)
    l3_cpus: Mapping[int, CPUSet] = field(init=False, repr=False, compare=False)
    die_cpus: Mapping[tuple[int, int], CPUSet] = field(init=False, repr=False, compare=False)
    kind_cpus: Mapping[str, CPUSet] = field(init=False, repr=False, compare=False)  # {} if uniform

    def __post_init__(self) -> None:
        if not self.cpus:
            raise TopologyError("topology has no CPUs")
        by_cpu: dict[int, CPUInfo] = {}
        for info in self.cpus:
            if info.cpu in by_cpu:
                raise TopologyError(f"CPU {info.cpu} listed twice")
            by_cpu[info.cpu] = info
        core_keys = sorted({(c.socket, c.core) for c in self.cpus})
        global_core = {key: i for i, key in enumerate(core_keys)}
        core_of = {c.cpu: global_core[(c.socket, c.core)] for c in self.cpus}
        for core_cpus in _group(self.cpus, lambda c: core_of[c.cpu]).values():
            numas = {by_cpu[c].numa for c in core_cpus}
            if len(numas) > 1:
                raise TopologyError(f"SMT siblings {sorted(core_cpus)} span NUMA nodes {sorted(numas)}")
        s = object.__setattr__
        s(self, "cpus", tuple(sorted(self.cpus, key=lambda c: c.cpu)))
        s(self, "by_cpu", by_cpu)
        s(self, "core_of", core_of)
        s(self, "all_cpus", CPUSet(by_cpu))
        s(self, "online", CPUSet(c.cpu for c in self.cpus if c.online))
        s(self, "isolated", CPUSet(c.cpu for c in self.cpus if c.isolated and c.online))
        s(self, "socket_cpus", _sets(self.cpus, lambda c: c.socket))
        s(self, "numa_cpus", _sets(self.cpus, lambda c: c.numa))
        s(self, "core_cpus", _sets(self.cpus, lambda c: core_of[c.cpu]))
        s(self, "l3_cpus", _sets(self.cpus, lambda c: c.l3))
        s(self, "die_cpus", _sets(self.cpus, lambda c: (c.socket, c.die)))
        kinds = _sets([c for c in self.cpus if c.kind], lambda c: c.kind)
        s(self, "kind_cpus", kinds if len(kinds) > 1 else {})
        s(self, "memory_only_nodes", tuple(sorted(set(self.memory_only_nodes) - set(self.numa_cpus))))
        missing = [n for n in self.numa_cpus if self.numa_distances and n not in self.numa_distances]
        if missing:
            raise TopologyError(f"NUMA distances missing for node(s) {missing}")

    # -- simple facts ------------------------------------------------------
    @property
    def numa_nodes(self) -> list[int]:
        return sorted(self.numa_cpus)

    @cached_property
    def online_numa(self) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
        """((node, its CPU mask), ...) for nodes with online CPUs, ascending, and the running sums of
        their online CPU counts taken largest first (entry k: the most CPUs k + 1 nodes hold): what
        every CPU hint generation starts from, worked out once."""
        online = self.online.mask
        nodes = tuple((n, self.numa_cpus[n].mask) for n in sorted(self.numa_cpus) if self.numa_cpus[n].mask & online)
        return nodes, tuple(itertools.accumulate(sorted(((m & online).bit_count() for _, m in nodes), reverse=True)))

    @property
    def all_numa_nodes(self) -> list[int]:
        """Every NUMA node, memory-only ones included (what cpuset.mems may name)."""
        return sorted(set(self.numa_cpus) | set(self.memory_only_nodes))

    @property
    def sockets(self) -> list[int]:
        return sorted(self.socket_cpus)

    @property
    def threads_per_core(self) -> int:
        return max(len(s) for s in self.core_cpus.values())

    def siblings(self, cpu: int) -> CPUSet:
        return self.core_cpus[self.core_of[cpu]]

    def distance(self, a: int, b: int) -> int:
        """NUMA distance; without a distance table local=10, remote=20 (the kernel's defaults)."""
        row = self.numa_distances.get(a)
        if row is not None and b in row:
            return row[b]
        return 10 if a == b else 20

    def numa_of(self, cpus: CPUSet) -> list[int]:
        return sorted({self.by_cpu[c].numa for c in cpus})

    def cpus_in_numa(self, nodes: Iterable[int]) -> CPUSet:
        out = EMPTY
        for n in nodes:
            out = out | self.numa_cpus.get(n, EMPTY)
        return out

    # -- JSON shape (shared by `topology --json` and `simulate`) -----------
    def to_json(self) -> dict[str, Any]:
        nodes = self.all_numa_nodes
        cpus = []
        for c in self.cpus:
            entry: dict[str, Any] = {"cpu": c.cpu, "core": c.core, "socket": c.socket,
                                     "numa": c.numa, "l3": c.l3, "die": c.die}
            if not c.online:
                entry["online"] = False
            if c.isolated:
                entry["isolated"] = True
            if c.cluster:
                entry["cluster"] = c.cluster
            if c.kind:
                entry["kind"] = c.kind
            cpus.append(entry)
        out: dict[str, Any] = {
            "cpus": cpus,
            "numa_distances": [[self.distance(a, b) for b in nodes] for a in nodes],
        }
        if self.memory_only_nodes:
            out["memory_only_nodes"] = list(self.memory_only_nodes)
        if self.numa_memory_bytes:
            out["numa_memory_bytes"] = {str(n): v for n, v in sorted(self.numa_memory_bytes.items())}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Topology:
        """Inverse of ``to_json``; ``numa_distances`` rows follow sorted NUMA node ids."""
        try:
            raw_cpus = data["cpus"]
            cpus = tuple(
                CPUInfo(
                    cpu=_int(c, "cpu"), socket=_int(c, "socket"), core=_int(c, "core"),
                    numa=_int(c, "numa", 0), l3=_int(c, "l3", _int(c, "socket")),
                    die=_int(c, "die", 0), online=bool(c.get("online", True)),
                    isolated=bool(c.get("isolated", False)), cluster=_int(c, "cluster", 0),
                    kind=str(c.get("kind", "")),
                )
                for c in raw_cpus
            )
            memory_only = tuple(int(n) for n in data.get("memory_only_nodes") or ())
        except (KeyError, TypeError, ValueError) as exc:
            raise TopologyError(f"bad topology.cpus entry: {exc}") from exc
        nodes = sorted({c.numa for c in cpus} | set(memory_only))
        dist_rows: Sequence[Sequence[int]] = data.get("numa_distances") or []
        distances: dict[int, dict[int, int]] = {}
        if dist_rows:
            if len(dist_rows) != len(nodes) or any(len(r) != len(nodes) for r in dist_rows):
                raise TopologyError(
                    f"numa_distances must be a {len(nodes)}x{len(nodes)} matrix for NUMA nodes {nodes}")
            distances = {a: {b: int(dist_rows[i][j]) for j, b in enumerate(nodes)}
                         for i, a in enumerate(nodes)}
        mem = {int(k): int(v) for k, v in (data.get("numa_memory_bytes") or {}).items()}
        return cls(cpus=cpus, numa_distances=distances, numa_memory_bytes=mem, memory_only_nodes=memory_only)


def _int(entry: Mapping[str, Any], key: str, default: int | None = None) -> int:
    if key not in entry:
        if default is None:
            raise TopologyError(f"CPU entry {dict(entry)} lacks {key!r}")
        return default
    value = entry[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TopologyError(f"CPU entry {dict(entry)}: {key!r} must be a non-negative integer")
    return value


def _group(cpus: Iterable[CPUInfo], key: Any) -> dict[Any, list[int]]:
    out: dict[Any, list[int]] = {}
    for c in cpus:
        out.setdefault(key(c), []).append(c.cpu)
    return out


def _sets(cpus: Iterable[CPUInfo], key: Any) -> dict[Any, CPUSet]:
    return {k: CPUSet(v) for k, v in sorted(_group(cpus, key).items())}
