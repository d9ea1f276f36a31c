"""NUMA nodes from ``/sys/devices/system/node``, repaired the way hwloc repairs them.

* The nodes are those in ``node/online`` (else the ``nodeN`` directories); CPU-less
  nodes (memory-only, CXL, HBM) are real nodes: they get distances and memory and
  are valid ``cpuset.mems`` targets.
* A node's CPUs come from the ``cpumap`` mask (else ``cpulist``). A CPU claimed by
  two nodes stays in the lowest one (hwloc keeps the first node and drops the
  later claim).
* ``nodeN/distance`` has one value per node in ascending order. A longer row that
  reaches every node id is read by node id (offline nodes still have columns), other
  longer rows are cut to the node count; a shorter or unreadable row drops the whole
  table (as hwloc does): distances then default to 10 local / 20 remote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..cpuset import CPUSet
from .sysfs_read import Reader

_NODE_DIR = re.compile(r"node(\d+)")
_MEMTOTAL = re.compile(r"^Node\s+\d+\s+MemTotal:\s+(\d+)\s+kB\s*$", re.MULTILINE)


@dataclass
class Numa:
    nodes: list[int]  # every node, CPU-less ones included
    of: dict[int, int]  # CPU -> node for the CPUs some node claims
    distances: dict[int, dict[int, int]] = field(default_factory=dict)
    memory: dict[int, int] = field(default_factory=dict)


def read_numa(r: Reader, node_dir: Path, cpus: CPUSet) -> Numa:
    dirs = sorted(int(m.group(1)) for e in r.listdir(node_dir) if (m := _NODE_DIR.fullmatch(e)))
    online = r.cpulist(node_dir / "online")
    nodes = sorted(online) if online else dirs
    if online and set(online) - set(dirs):
        r.warn(f"node/online lists node(s) {sorted(set(online) - set(dirs))} without a directory")
        nodes = [n for n in nodes if n in dirs]
    if not nodes:
        if r.isdir(node_dir) or dirs:
            r.warn(f"no usable NUMA node under {node_dir}: one NUMA node 0 with all CPUs")
        else:
            r.warn(f"no NUMA node directories under {node_dir}: one NUMA node 0 with all CPUs")
        return Numa([], {})
    of: dict[int, int] = {}
    doubles: dict[int, list[int]] = {}
    for n in nodes:
        d = node_dir / f"node{n}"
        claimed = r.cpumask(d / "cpumap")  # hwloc's source; the list when the mask is unreadable
        if claimed is None:
            claimed = r.cpulist(d / "cpulist")
        for c in (claimed or CPUSet()) & cpus:
            if c in of:
                doubles.setdefault(c, [of[c]]).append(n)
            else:
                of[c] = n
    for c, claims in sorted(doubles.items()):
        r.warn(f"CPU {c} is listed in NUMA nodes {claims}: kept in node {claims[0]}")
    return Numa(nodes, of, _distances(r, node_dir, nodes), _memory(r, node_dir, nodes))


def _distances(r: Reader, node_dir: Path, nodes: list[int]) -> dict[int, dict[int, int]]:
    rows: dict[int, dict[int, int]] = {}
    for n in nodes:
        path = node_dir / f"node{n}" / "distance"
        text = r.text(path)
        values: list[int] = []
        for word in (text or "").split():
            try:
                values.append(int(word))
            except ValueError:
                break
        if len(values) < len(nodes):
            why = "missing" if text is None else f"has {len(values)} values for {len(nodes)} nodes {nodes}"
            r.warn(f"{path} {why}: NUMA distances dropped (10 local / 20 remote)")
            return {}
        if len(values) > len(nodes):
            r.warn(f"{path} has {len(values)} values for {len(nodes)} nodes {nodes}: extra values ignored")
        if len(values) > len(nodes) and len(values) > max(nodes):
            rows[n] = {m: values[m] for m in nodes}
        else:
            rows[n] = dict(zip(nodes, values[:len(nodes)], strict=True))
    return rows


def _memory(r: Reader, node_dir: Path, nodes: list[int]) -> dict[int, int]:
    memory: dict[int, int] = {}
    missing: list[int] = []
    for n in nodes:
        path = node_dir / f"node{n}" / "meminfo"
        match = _MEMTOTAL.search(r.text(path) or "")
        if match is None:
            missing.append(n)
        else:
            memory[n] = int(match.group(1)) * 1024
    if missing:
        r.warn(f"no MemTotal in meminfo of NUMA node(s) {missing}: memory size unknown")
    return memory


def cpu_node_link(r: Reader, cpu_dir: Path, cpu: int) -> int | None:
    """The node of ``cpuN`` from its ``nodeM`` link (kept by offline CPUs)."""
    links = [int(m.group(1)) for e in r.listdir(cpu_dir / f"cpu{cpu}") if (m := _NODE_DIR.fullmatch(e))]
    return links[0] if len(links) == 1 else None
