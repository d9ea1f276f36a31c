"""Per-NUMA memory and hugepage capacity from sysfs (``node*/meminfo``, ``node*/hugepages``).

Memory-only nodes (CXL, HBM: an empty ``cpulist``) are listed too: they are valid
``cpuset.mems`` targets.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

_MEMTOTAL = re.compile(r"^Node\s+\d+\s+MemTotal:\s+(\d+)\s+kB\s*$", re.MULTILINE)
_HUGEDIR = re.compile(r"^hugepages-(\d+)kB$")


class MemoryDiscoveryError(ValueError):
    """A node's memory files exist but cannot be read as the kernel writes them."""


@dataclass(frozen=True)
class NodeMemory:
    node: int
    memory_bytes: int
    hugepages: dict[int, int] = field(default_factory=dict)  # page size in bytes -> total bytes
    has_cpus: bool = True
    distances: dict[int, int] = field(default_factory=dict)  # to every node, from node*/distance


def read_node_memory(root: str | Path = "/") -> list[NodeMemory]:
    """Every NUMA node with its memory and hugepage totals; empty when sysfs has no node dir."""
    node_dir = Path(root) / "sys" / "devices" / "system" / "node"
    try:
        names = os.listdir(node_dir)
    except OSError:
        return []
    out: list[NodeMemory] = []
    for name in sorted(names, key=lambda n: (len(n), n)):
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        n = int(name[4:])
        d = node_dir / name
        try:
            text = (d / "meminfo").read_text()
        except OSError:
            continue
        match = _MEMTOTAL.search(text)
        if match is None:
            raise MemoryDiscoveryError(f"{d / 'meminfo'}: no 'Node {n} MemTotal: <N> kB' line")
        hugepages: dict[int, int] = {}
        try:
            sizes = os.listdir(d / "hugepages")
        except OSError:
            sizes = []
        for size in sizes:
            m = _HUGEDIR.match(size)
            if not m:
                continue
            try:
                pages = int((d / "hugepages" / size / "nr_hugepages").read_text().strip())
            except (OSError, ValueError) as exc:
                raise MemoryDiscoveryError(f"{d / 'hugepages' / size}: unreadable nr_hugepages ({exc})") from exc
            page = int(m.group(1)) * 1024
            hugepages[page] = pages * page
        try:
            has_cpus = bool((d / "cpulist").read_text().strip())
        except OSError:
            has_cpus = False
        try:
            row = [int(v) for v in (d / "distance").read_text().split()]
        except (OSError, ValueError):
            row = []
        out.append(NodeMemory(n, int(match.group(1)) * 1024, hugepages, has_cpus, dict(enumerate(row))))
    return out
