"""Read hwloc's view of a sysfs tree: run ``lstopo-no-graphics --of xml`` with HWLOC_FSROOT and parse it.

Used by tests/engine/test_hwloc_diff.py (loaded by path) and scripts/hwloc_real_trees.py. The x86
backend is disabled (HWLOC_COMPONENTS=-x86): it would read this machine's CPUID, not the tree.
HWLOC_USE_NUMA_DISTANCES=1 keeps CPU-less nodes CPU-less (hwloc otherwise lends them the CPUs of
their nearest node, a locality guess).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import Topology

LSTOPO = shutil.which("lstopo-no-graphics")


@dataclass
class Hwloc:
    pus: CPUSet
    packages: set[CPUSet] = field(default_factory=set)
    cores: set[CPUSet] = field(default_factory=set)
    l3: set[CPUSet] = field(default_factory=set)
    numa: dict[int, CPUSet] = field(default_factory=dict)  # node -> CPUs
    distances: dict[tuple[int, int], int] = field(default_factory=dict)
    kinds: set[CPUSet] = field(default_factory=set)
    stderr: str = ""


def _bitmap(text: str) -> CPUSet:
    """hwloc bitmap: comma-separated 0x words, most significant first (an empty word is zero)."""
    mask = 0
    for word in text.replace("0xf...f", "0x0").split(","):
        mask = (mask << 32) | int(word or "0", 16)
    return CPUSet.from_mask(mask)


def run_lstopo(tree: Path, expect_stderr: str = "", check_stderr: bool = True, whole_system: bool = False) -> Hwloc:
    """``whole_system``: ignore the cgroup cpuset a captured tree's /proc names (discovery does too)."""
    assert LSTOPO is not None
    env = {**os.environ, "HWLOC_FSROOT": str(tree), "HWLOC_COMPONENTS": "-x86", "HWLOC_USE_NUMA_DISTANCES": "1"}
    argv = [LSTOPO, "--of", "xml", *(["--whole-system"] if whole_system else []), "-"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                          check=True)
    if expect_stderr:
        assert expect_stderr in proc.stderr, f"hwloc no longer reports the firmware bug of {tree.name}"
    elif check_stderr:
        assert proc.stderr == "", f"hwloc warned on {tree.name}: {proc.stderr}"
    out_stderr = proc.stderr
    root = ET.fromstring(proc.stdout)
    out = Hwloc(pus=CPUSet(), stderr=out_stderr)
    pus: list[int] = []
    for obj in root.iter("object"):
        kind, cpuset = obj.get("type"), _bitmap(obj.get("cpuset", "0x0"))
        if kind == "PU":
            pus.append(int(obj.get("os_index", "-1")))
        elif kind == "Package":
            out.packages.add(cpuset)
        elif kind == "Core":
            out.cores.add(cpuset)
        elif kind == "L3Cache":
            out.l3.add(cpuset)
        elif kind == "NUMANode":
            out.numa[int(obj.get("os_index", "-1"))] = cpuset
    out.pus = CPUSet(pus)
    for dist in root.iter("distances2"):
        if dist.get("type") != "NUMANode":
            continue
        # long arrays are split over several elements
        nodes = [int(v) for e in dist.iter("indexes") for v in (e.text or "").split()]
        values = [int(v) for e in dist.iter("u64values") for v in (e.text or "").split()]
        for i, a in enumerate(nodes):
            for j, b in enumerate(nodes):
                out.distances[(a, b)] = values[i * len(nodes) + j]
    for cpukind in root.iter("cpukind"):
        out.kinds.add(_bitmap(cpukind.get("cpuset", "0x0")))
    return out


def groups(topo: Topology, sets: object) -> set[CPUSet]:
    return {s & topo.online for s in sets.values()} - {CPUSet()}  # type: ignore[attr-defined]


def left_out(hw_sets: object, pus: CPUSet) -> CPUSet:
    """The CPUs hwloc puts in none of these sets (it leaves them outside that level)."""
    inside = CPUSet()
    for s in hw_sets:  # type: ignore[attr-defined]
        inside = inside | s
    return pus - inside


def states_agree(theirs: set[CPUSet], ours: set[CPUSet], pus: CPUSet) -> bool:
    """Every group hwloc states is one of ours, and our others hold only CPUs hwloc leaves out.

    hwloc leaves CPUs outside a level when the tree's sets for them conflict; the model places
    every CPU, so those CPUs form groups hwloc does not have (README, topology section)."""
    outside = left_out(theirs, pus)
    return theirs <= ours and all(g.issubset(outside) for g in ours - theirs)


def numa_agrees(topo: Topology, hw: Hwloc) -> list[int]:
    """The NUMA nodes where we disagree with what hwloc states (same rule as ``states_agree``)."""
    outside = left_out(hw.numa.values(), hw.pus)
    bad = []
    for node in sorted(set(hw.numa) | set(topo.numa_cpus)):
        ours = topo.cpus_in_numa([node]) & topo.online if node in topo.numa_cpus else CPUSet()
        theirs = hw.numa.get(node, CPUSet())
        if not theirs.issubset(ours) or not (ours - theirs).issubset(outside):
            bad.append(node)
    return bad


def placed(topo: Topology, hw: Hwloc) -> list[str]:
    """The levels where we place CPUs that hwloc leaves outside (empty on most trees)."""
    out = []
    for what, theirs, ours in (("packages", hw.packages, topo.socket_cpus), ("L3 groups", hw.l3, topo.l3_cpus)):
        if theirs and theirs != groups(topo, ours):
            out.append(f"{what} {left_out(theirs, hw.pus)}")
    if any(cpus for cpus in hw.numa.values()) and left_out(hw.numa.values(), hw.pus):
        out.append(f"NUMA {left_out(hw.numa.values(), hw.pus)}")
    return out


def differences(topo: Topology, hw: Hwloc) -> list[str]:
    """Where discovery and hwloc disagree, on what hwloc states (empty: they agree)."""
    out: list[str] = []
    if hw.pus != topo.online:
        out.append(f"online CPUs: hwloc {hw.pus}, ours {topo.online}")
    for what, theirs, ours in (("packages", hw.packages, topo.socket_cpus), ("cores", hw.cores, topo.core_cpus),
                               ("L3 groups", hw.l3, topo.l3_cpus)):
        if theirs and not states_agree(theirs, groups(topo, ours), hw.pus):
            out.append(what)
    out.extend(f"CPUs of NUMA node {node}" for node in numa_agrees(topo, hw))
    if any(topo.distance(a, b) != d for (a, b), d in hw.distances.items()):
        out.append("distances")
    return out
