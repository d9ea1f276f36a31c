"""Differential test: discovery agrees with hwloc's lstopo on every shipped sysfs fixture.

lstopo (Debian's hwloc-nox, a test dependency: scripts/test installs it) reads the same tree
through HWLOC_FSROOT. Compared: online CPUs, packages, cores, each CPU's NUMA node, L3 groups,
CPU-less NUMA nodes and the distance matrix. hwloc falls back to describing the machine it runs
on when it finds no topology under the root, so the PU count must equal the fixture's online
CPUs, and any stderr output fails the test. The x86 backend is disabled (HWLOC_COMPONENTS=-x86):
it would read this machine's CPUID, not the tree. HWLOC_USE_NUMA_DISTANCES=1 keeps CPU-less nodes
CPU-less (hwloc otherwise gives them the CPUs of their nearest node, a locality guess).

Where hwloc drops data it finds inconsistent, the comparison covers what hwloc kept (see
KNOWN_DIVERGENCES): the answer must still agree on everything hwloc states. Three of hwloc's own
captured trees (tests/fixtures/hwloc) are compared the same way: there lstopo leaves CPUs outside
a level (no package, L3 or NUMA node) and discovery places them (LEFT_OUT says where).
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.sysfs import discover_with_warnings
from testkit.scripts import load_script

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "sysfs"




hwloc_xml = load_script("hwloc_xml")
LSTOPO, run_lstopo, groups = hwloc_xml.LSTOPO, hwloc_xml.run_lstopo, hwloc_xml.groups
if LSTOPO is None and os.environ.get("NRI_PINNER_HWLOC_REQUIRED") == "1":  # scripts/test as root sets it
    raise RuntimeError("lstopo-no-graphics missing: scripts/test installs Debian's hwloc-nox")

# fixture -> (why hwloc's answer is partial there, the stderr hwloc prints for it or "")
KNOWN_DIVERGENCES = {
    # hwloc keeps the first node claiming a CPU and drops the later node whole (CPUs, memory,
    # distances); we keep node 2 and its other CPUs: memory there is real
    "fw-cpu-in-two-nodes": ("hwloc drops node 2, which overlaps node 1", ""),
    # firmware puts CPU 4 (sibling of CPU 0) in node 1: hwloc reports the OS error and keeps the raw
    # node sets; we move the whole core to its first CPU's node (a core cannot span nodes in the model)
    "fw-smt-across-nodes": ("hwloc keeps CPU 4 in node 1", "intersection without inclusion"),
}


FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


@pytest.mark.skipif(LSTOPO is None, reason="hwloc-nox not installed (scripts/test installs it)")
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_discovery_agrees_with_lstopo(name: str) -> None:
    tree = FIXTURES / name
    found = discover_with_warnings(tree)
    topo = found.topology
    why, expect_stderr = KNOWN_DIVERGENCES.get(name, ("", ""))
    hw = run_lstopo(tree, expect_stderr)
    assert hw.pus == topo.online, "online CPUs (a differing count also catches hwloc's host fallback)"
    assert hw.packages == groups(topo, topo.socket_cpus)
    assert hw.cores == groups(topo, topo.core_cpus)
    assert hw.l3 == groups(topo, topo.l3_cpus)
    cpuless = {n for n, s in hw.numa.items() if not s}
    if not why:
        assert set(hw.numa) == set(topo.all_numa_nodes)
        assert cpuless == set(topo.memory_only_nodes)
    for node, cpus in hw.numa.items():
        if cpus and not why:
            assert topo.cpus_in_numa([node]) & topo.online == cpus, f"CPUs of NUMA node {node}"
        elif cpus and cpus != hw.pus:  # hwloc's raw sets: we agree on all CPUs but the bug's victim
            ours = topo.cpus_in_numa([node]) & topo.online
            assert len(ours ^ cpus) <= len(topo.threads_per_core * [0]), f"CPUs of NUMA node {node}"
    if hw.distances:
        for (a, b), d in hw.distances.items():
            assert topo.distance(a, b) == d, f"distance {a}->{b}"
    elif len(topo.all_numa_nodes) > 1:
        assert topo.numa_distances == {}, "hwloc found no usable distance table"
    if hw.kinds - {hw.pus}:  # one kind of all PUs is a uniform machine; hwloc 2.9 reads cpu_capacity
        assert hw.kinds == groups(topo, topo.kind_cpus)  # but not the cpu_core/cpu_atom PMUs


def test_known_divergences_still_diverge() -> None:
    """A divergence that hwloc no longer shows must leave the list (keeps the list honest)."""
    if LSTOPO is None:
        pytest.skip("hwloc-nox not installed")
    name = "fw-cpu-in-two-nodes"
    hw = run_lstopo(FIXTURES / name)
    topo = discover_with_warnings(FIXTURES / name).topology
    assert set(hw.numa) == {0, 1} and topo.all_numa_nodes == [0, 1, 2]
    assert topo.by_cpu[3].numa == 1 and hw.numa[1] == topo.numa_cpus[1]  # the first claim wins in both
    name = "fw-smt-across-nodes"
    hw = run_lstopo(FIXTURES / name, KNOWN_DIVERGENCES[name][1])
    topo = discover_with_warnings(FIXTURES / name).topology
    assert 4 in hw.numa[1] and topo.by_cpu[4].numa == 0 == topo.by_cpu[0].numa


# Three of hwloc's captured trees (tests/fixtures/hwloc/README.md): lstopo leaves CPUs outside a
# level there (no package, no L3, no NUMA node). Discovery agrees on everything lstopo states and
# places the CPUs it leaves out (README, topology repairs): tree -> (lstopo's stderr, where they go).
HWLOC_TREES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "hwloc"
LEFT_OUT: dict[str, tuple[str, dict[str, str]]] = {
    # CPU 3's package mask and CPU 2's L3 mask read 0-3: hwloc makes an object only from the first
    # CPU of its set, so 3,7,…,39 get no package and 2,6,…,38 no L3 (its stderr is about a PCI group)
    "40intel64-4n10c+pci-conflicts": ("intersection without inclusion", {
        "packages": "3,7,11,15,19,23,27,31,35,39", "L3": "2,6,10,14,18,22,26,30,34,38"}),
    # nodes 4 (16-23) and 5 (12-23) overlap node 3 (20-23): hwloc drops them; no node claims 4-7
    "fakeheterocpunuma": ("", {"NUMA": "4-7,12-19"}),
    # the online even CPUs link to node 0, which is offline (no directory): hwloc gives them no node
    "offline-cpu0-node0": ("", {"NUMA": "4,6,8,10,12,14,16,18,20"}),
}


@pytest.fixture(scope="module")
def hwloc_trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hwloc")
    for name in LEFT_OUT:
        with tarfile.open(HWLOC_TREES / f"{name}.tar.bz2") as tar:
            tar.extractall(out, filter="tar")
    return out


@pytest.mark.skipif(LSTOPO is None, reason="hwloc-nox not installed (scripts/test installs it)")
@pytest.mark.parametrize("name", sorted(LEFT_OUT))
def test_hwloc_tree_agrees_with_lstopo_where_it_states(name: str, hwloc_trees: Path) -> None:
    tree = hwloc_trees / name
    topo = discover_with_warnings(tree).topology
    expect_stderr, left_out = LEFT_OUT[name]
    hw = run_lstopo(tree, expect_stderr, whole_system=True)  # a captured /proc names a cgroup cpuset
    assert hw.pus == topo.online
    assert hw.cores == groups(topo, topo.core_cpus)
    for level, theirs, ours in (("packages", hw.packages, topo.socket_cpus), ("L3", hw.l3, topo.l3_cpus)):
        if not theirs:  # the tree has no such level (fakeheterocpunuma: no caches): lstopo states none
            continue
        ours_groups = groups(topo, ours)
        outside = hwloc_xml.left_out(theirs, hw.pus)
        assert outside == CPUSet.parse(left_out.get(level, "")), f"CPUs lstopo leaves without {level}"
        assert theirs <= ours_groups, f"every {level} group lstopo states is one of ours"
        assert ours_groups - theirs == ({outside} if outside else set()), f"{level}: the rest, one group"
    outside = hwloc_xml.left_out(hw.numa.values(), hw.pus)
    assert outside == CPUSet.parse(left_out.get("NUMA", "")), "CPUs lstopo puts in no NUMA node"
    for node, cpus in hw.numa.items():  # lstopo's nodes: ours hold the same CPUs plus some it left out
        ours_cpus = topo.cpus_in_numa([node]) & topo.online
        assert cpus.issubset(ours_cpus) and (ours_cpus - cpus).issubset(outside), f"NUMA node {node}"
    for node in set(topo.all_numa_nodes) - set(hw.numa):  # nodes lstopo drops hold only CPUs it left out
        assert (topo.cpus_in_numa([node]) & topo.online).issubset(outside), f"NUMA node {node}"
    for (a, b), d in hw.distances.items():
        assert topo.distance(a, b) == d, f"distance {a}->{b}"
    assert hwloc_xml.differences(topo, hw) == []  # what scripts/hwloc_real_trees.py counts as agreeing


def test_hwloc_trees_left_out_cpus_placed(hwloc_trees: Path) -> None:
    """Where discovery puts what lstopo leaves out (no lstopo needed): the README's account."""
    topo = discover_with_warnings(hwloc_trees / "40intel64-4n10c+pci-conflicts").topology
    assert topo.socket_cpus[3] == CPUSet.parse("3,7,11,15,19,23,27,31,35,39")  # physical_package_id 3
    assert topo.l3_cpus[topo.by_cpu[2].l3] == topo.socket_cpus[2]  # their package is their L3 group
    found = discover_with_warnings(hwloc_trees / "fakeheterocpunuma")
    topo = found.topology
    assert {n: str(topo.numa_cpus[n]) for n in topo.numa_nodes} == {
        0: "0-7", 1: "8-11", 3: "20-23", 4: "16-19", 5: "12-15"}  # first claim wins, nodes kept
    assert topo.memory_only_nodes == (2,) and topo.distance(4, 5) == 30
    found = discover_with_warnings(hwloc_trees / "offline-cpu0-node0")
    assert found.topology.numa_cpus[1] & found.topology.online == CPUSet.parse("4-20")  # the only node
    assert any("NUMA node unknown for CPUs 0,2,4" in w for w in found.warnings)
