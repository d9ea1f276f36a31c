"""Topology discovery from sysfs: captured and generated trees, degradation, and bad input."""
# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import Topology
from nri_pinner.engine.topology.sysfs import SysfsError, discover, discover_with_warnings
from testkit.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "sysfs"




gen = load_script("gen_sysfs")


def sysdir(root: Path) -> Path:
    return root / "sys" / "devices" / "system"


def copy_fixture(name: str, dest: Path) -> Path:
    shutil.copytree(FIXTURES / name, dest / name, symlinks=True)
    return dest / name


def partition(groups: Any) -> set[frozenset[int]]:
    return {frozenset(g) for g in groups if g}


def assert_matches_shape(topo: Topology, shape: Any) -> None:
    """Every fact the generator's layout states, checked against what discovery found."""
    facts = gen.layout(shape)
    assert topo.all_cpus == CPUSet(f.cpu for f in facts)
    assert topo.online == CPUSet(f.cpu for f in facts if f.online)
    assert topo.isolated == CPUSet(f.cpu for f in facts if f.isolated and f.online)
    online_nodes = {f.numa for f in facts if f.online}
    for f in facts:
        info = topo.by_cpu[f.cpu]
        assert (info.numa, info.online, info.isolated) == (f.numa, f.online, f.isolated)
        if f.online:
            assert (info.socket, info.die) == (f.socket, f.die)
        elif f.numa in online_nodes:  # offline CPUs borrow their node's socket, when it has online CPUs
            assert info.socket == f.socket
    online = [f for f in facts if f.online]
    cores: dict[int, set[int]] = {}
    l3s: dict[int, set[int]] = {}
    for f in online:
        cores.setdefault(f.core_index, set()).add(f.cpu)
        l3s.setdefault(f.l3, set()).add(f.cpu)
    for f in online:
        assert set(topo.siblings(f.cpu)) == cores[f.core_index]
    assert partition(s & topo.online for s in topo.core_cpus.values()) == partition(cores.values())
    assert partition(s & topo.online for s in topo.l3_cpus.values()) == partition(l3s.values())
    first = shape.first_node
    cpu_nodes = sorted({f.numa for f in facts})
    assert topo.numa_nodes == cpu_nodes
    assert topo.all_numa_nodes == list(range(first, first + shape.numa_nodes + shape.cpuless_nodes))
    for a in topo.all_numa_nodes:
        for b in topo.all_numa_nodes:
            assert topo.distance(a, b) == shape.distance(a - first, b - first)
    assert dict(topo.numa_memory_bytes) == {n: shape.mem_kib_per_numa * 1024 for n in topo.all_numa_nodes}
    names = {"P": "P", "E": "E", "": ""} if shape.hybrid == "intel" else {"P": "big", "E": "little", "": ""}
    for f in online:
        assert topo.by_cpu[f.cpu].kind == names[f.kind]


# -- the captured VM tree ---------------------------------------------------
def test_captured_vm_tree() -> None:
    root = FIXTURES / "vm-2cpu"
    found = discover_with_warnings(root)
    topo = found.topology
    assert found.warnings == ()
    assert topo.all_cpus == topo.online == CPUSet.parse("0-1")
    assert topo.sockets == [0] and topo.numa_nodes == [0]
    assert topo.threads_per_core == 1
    assert topo.siblings(0) == CPUSet([0]) and topo.siblings(1) == CPUSet([1])
    assert topo.l3_cpus == {0: CPUSet.parse("0-1")}
    assert topo.distance(0, 0) == 10
    meminfo = (sysdir(root) / "node" / "node0" / "meminfo").read_text().splitlines()
    kib = int(next(line for line in meminfo if "MemTotal" in line).split()[3])
    assert topo.numa_memory_bytes == {0: kib * 1024}


# -- committed synthetic trees ----------------------------------------------
# fixture -> the repairs discovery must report (one warning each); every other fixture reports none
REPAIRS = {
    "fw-cpu-in-two-nodes": ["CPU 3 is listed in NUMA nodes [1, 2]: kept in node 1"],
    "fw-distance-long-rows": ["node0/distance has 4 values for 2 nodes", "node1/distance has 4 values"],
    "fw-smt-across-nodes": ["SMT siblings 0,4 span NUMA nodes: all placed on node 0"],
    "no-cache-id": ["L3 cache without an id file"],
    "old-kernel-masks": ["L3 cache without an id file"],
    "package-id-minus-one": ["physical_package_id -1: packages taken from package_cpus"],
    "package-id-repeated": ["physical_package_id missing or repeated: packages taken from package_cpus"],
    "no-online-files": ["cpu/online missing: each cpuN/online decides"],
    "per-cpu-online": ["cpu/online missing: each cpuN/online decides"],
}


@pytest.mark.parametrize("name", sorted(gen.NAMED))
def test_committed_tree_matches_its_shape(name: str) -> None:
    found = discover_with_warnings(FIXTURES / name)
    expected = REPAIRS.get(name, [])
    assert len(found.warnings) == len(expected), found.warnings
    for warning, text in zip(found.warnings, expected, strict=True):
        assert text in warning
    assert_matches_shape(found.topology, gen.NAMED[name])


def test_sources_say_which_file_won() -> None:
    assert discover_with_warnings(FIXTURES / "package-id-minus-one").sources["packages"] == \
        "package_cpus/core_siblings (renumbered)"
    old = discover_with_warnings(FIXTURES / "old-kernel-masks").sources
    assert (old["dies"], old["L3"]) == ("none", "shared_cpu_list/map")
    assert discover_with_warnings(FIXTURES / "hybrid-intel").sources["core kinds"] == "cpu_core/cpu_atom PMUs"


def test_hybrid_kinds() -> None:
    intel = discover(FIXTURES / "hybrid-intel")
    assert intel.kind_cpus == {"E": CPUSet.parse("4-7"), "P": CPUSet.parse("0-3")}
    arm = discover(FIXTURES / "hybrid-arm-capacity")
    assert arm.kind_cpus == {"big": CPUSet.parse("0-1"), "little": CPUSet.parse("2-5")}
    assert {c.cluster for c in arm.cpus} == {0, 1, 2}
    assert discover(FIXTURES / "dual-socket-ht").kind_cpus == {}
    freq = discover_with_warnings(FIXTURES / "hybrid-arm-cpufreq")
    assert freq.sources["core kinds"] == "cpufreq max"
    assert freq.topology.kind_cpus == {"big": CPUSet.parse("0-3"), "little": CPUSet.parse("4-7")}


def test_favored_cores_are_not_hybrid(tmp_path: Path) -> None:
    tree = copy_fixture("hybrid-arm-cpufreq", tmp_path)
    for f in sysdir(tree).glob("cpu/cpu[4-7]/cpufreq/cpuinfo_max_freq"):
        f.write_text("2600000\n")  # within 80% of 2808000: Turbo Boost Max 3.0, one kind
    assert discover(tree).kind_cpus == {}


def test_dies_clusters_and_l3_per_die() -> None:
    topo = discover(FIXTURES / "dies-clusters")
    assert len(topo.die_cpus) == 4 and len(topo.l3_cpus) == 8
    for (_socket, _die), cpus in topo.die_cpus.items():
        assert len({topo.by_cpu[c].l3 for c in cpus}) == 2  # two L3 groups per die: L3 stays the unit
    assert len({c.cluster for c in topo.cpus}) == 16


def test_old_kernel_masks_span_several_words() -> None:
    mask = (sysdir(FIXTURES / "old-kernel-masks") / "node" / "node3" / "cpumap").read_text()
    assert mask.count(",") == 2  # 96 possible CPUs: three 32-bit words
    topo = discover(FIXTURES / "old-kernel-masks")
    assert topo.numa_cpus[3] == CPUSet.parse("24-31,56-63")


def test_memory_only_nodes_are_real_nodes() -> None:
    topo = discover(FIXTURES / "memory-only-nodes")
    assert topo.numa_nodes == [0, 1] and topo.memory_only_nodes == (2, 3)
    assert topo.all_numa_nodes == [0, 1, 2, 3] and topo.distance(0, 3) == 21
    assert set(topo.numa_memory_bytes) == {0, 1, 2, 3}
    assert Topology.from_json(topo.to_json()).memory_only_nodes == (2, 3)


@pytest.mark.parametrize("name", sorted(gen.NAMED))
def test_committed_tree_is_what_the_generator_writes(name: str, tmp_path: Path) -> None:
    fresh = gen.write_tree(tmp_path / name, gen.NAMED[name])
    committed = FIXTURES / name

    def files(root: Path) -> dict[str, str]:
        return {str(p.relative_to(root)): (f"-> {p.readlink()}" if p.is_symlink() else p.read_text())
                for p in root.rglob("*") if p.is_file() or p.is_symlink()}

    assert files(committed) == files(fresh), f"re-run scripts/gen_sysfs.py to refresh {committed}"


def test_single_socket_ht_is_kubelet_numbering() -> None:
    topo = discover(FIXTURES / "single-socket-ht")  # kubelet topoSingleSocketHT
    assert len(topo.all_cpus) == 8 and len(topo.core_cpus) == 4
    for c in range(4):
        assert topo.siblings(c) == CPUSet([c, c + 4])


def test_dual_socket_ht_is_kubelet_numbering() -> None:
    topo = discover(FIXTURES / "dual-socket-ht")  # kubelet topoDualSocketHT
    assert topo.socket_cpus == {0: CPUSet.parse("0,2,4,6,8,10"), 1: CPUSet.parse("1,3,5,7,9,11")}
    assert topo.numa_cpus == {0: topo.socket_cpus[0], 1: topo.socket_cpus[1]}
    for c in range(12):
        assert topo.by_cpu[c].core == c % 6  # kubelet CoreID
        assert topo.siblings(c) == CPUSet([c % 6, c % 6 + 6])


def test_snc_nodes_share_socket_l3_and_core_ids_restart_per_socket() -> None:
    topo = discover(FIXTURES / "dual-socket-snc")
    assert topo.socket_cpus[0] == topo.cpus_in_numa([0, 1])
    assert topo.l3_cpus == {0: topo.socket_cpus[0], 1: topo.socket_cpus[1]}
    assert topo.by_cpu[0].core == topo.by_cpu[4].core == 0  # same sysfs core_id on both sockets ...
    assert topo.core_of[0] != topo.core_of[4]  # ... yet different cores
    assert topo.distance(0, 1) == 11 and topo.distance(0, 2) == 21


def test_amd_multi_l3_groups_and_adjacent_siblings() -> None:
    topo = discover(FIXTURES / "amd-multi-l3")
    assert topo.l3_cpus == {i: CPUSet(range(4 * i, 4 * i + 4)) for i in range(4)}
    assert topo.siblings(6) == CPUSet([6, 7])


def test_offline_and_isolated_cpus() -> None:
    topo = discover(FIXTURES / "offline-isolated")
    assert topo.all_cpus == CPUSet.parse("0-15")  # cpu/offline also lists 16-31: possible, not present
    assert topo.all_cpus - topo.online == CPUSet.parse("3,6,11")
    assert topo.isolated == CPUSet.parse("2,10,14")
    assert [topo.by_cpu[c].numa for c in (3, 6, 11)] == [0, 1, 0]  # from the cpuN/nodeM links
    for c in (3, 6, 11):  # no topology dir: each offline CPU is a core of its own on its node's socket
        assert topo.siblings(c) == CPUSet([c])
        assert topo.by_cpu[c].socket == 0
        assert topo.by_cpu[c].l3 == topo.by_cpu[c].numa
    assert topo.siblings(14) == CPUSet([14])  # its sibling 6 is offline
    assert len({topo.core_of[c] for c in topo.all_cpus}) == 10


# -- big shapes, generated into tmp ---------------------------------------------
@pytest.fixture(scope="module")
def large_trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("large")
    return {name: gen.write_tree(base / name, shape) for name, shape in gen.LARGE.items()}


@pytest.mark.parametrize("name", sorted(gen.LARGE))
def test_large_tree_matches_its_shape(name: str, large_trees: dict[str, Path]) -> None:
    found = discover_with_warnings(large_trees[name])
    assert found.warnings == (() if not gen.LARGE[name].old_kernel else ("L3 cache without an id file: "
                                                                          "groups taken from shared_cpu_list/"
                                                                          "shared_cpu_map",))
    assert_matches_shape(found.topology, gen.LARGE[name])


def test_kubelet_large_epyc_numbering(large_trees: dict[str, Path]) -> None:
    topo = discover(large_trees["dual-socket-8numa-256"])  # topoDualSocketMultiNumaPerSocketHTLarge
    assert len(topo.all_cpus) == 256 and len(topo.core_cpus) == 128
    for n in range(8):
        lo = 16 * n
        assert topo.numa_cpus[n] == CPUSet(range(lo, lo + 16)) | CPUSet(range(128 + lo, 128 + lo + 16))
    assert topo.socket_cpus[1] == topo.cpus_in_numa(range(4, 8))
    assert all(topo.siblings(c) == CPUSet([c, c + 128]) for c in range(128))
    assert len(topo.l3_cpus) == 32
    assert (topo.distance(0, 3), topo.distance(0, 4)) == (12, 32)


def test_1024_cpus_16_numa(large_trees: dict[str, Path]) -> None:
    topo = discover(large_trees["quad-socket-16numa-1024"])
    assert len(topo.all_cpus) == 1024
    counts = (len(topo.sockets), len(topo.numa_nodes), len(topo.core_cpus), len(topo.l3_cpus))
    assert counts == (4, 16, 512, 32)
    assert {len(s) for s in topo.numa_cpus.values()} == {64}


shapes = st.builds(
    gen.Shape,
    sockets=st.integers(1, 3), numa_per_socket=st.integers(1, 2), cores_per_numa=st.sampled_from([2, 4]),
    threads_per_core=st.integers(1, 2), dies_per_socket=st.sampled_from([1, 2]),
    siblings=st.sampled_from(["spread", "adjacent"]), interleave_sockets=st.booleans(),
    core_id_scope=st.sampled_from(["machine", "socket"]), l3_id_files=st.booleans(),
)


@settings(max_examples=25, deadline=None)
@given(shapes, st.data())
def test_any_generated_shape_is_discovered(shape: Any, data: st.DataObject) -> None:
    n = shape.cpus
    offline = data.draw(st.sets(st.integers(1, n - 1), max_size=n // 3), label="offline")
    isolated = data.draw(st.sets(st.integers(0, n - 1), max_size=n // 3), label="isolated")
    shape = gen.Shape(**{**shape.__dict__, "offline": frozenset(offline), "isolated": frozenset(isolated)})
    with tempfile.TemporaryDirectory() as tmp:
        found = discover_with_warnings(gen.write_tree(Path(tmp), shape))
    assert_matches_shape(found.topology, shape)
    assert all("L3 cache without an id" in w for w in found.warnings), found.warnings
    assert len(found.warnings) == (0 if shape.l3_id_files else 1)


# -- degradation: one warning per kind, sane result --------------------------------
@pytest.fixture
def tree(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    yield copy_fixture(getattr(request, "param", "dual-socket-snc"), tmp_path)


def test_no_node_dir_means_one_node_with_everything(tree: Path) -> None:
    shutil.rmtree(sysdir(tree) / "node")
    found = discover_with_warnings(tree)
    assert len(found.warnings) == 1 and "NUMA" in found.warnings[0]
    topo = found.topology
    assert topo.numa_cpus == {0: topo.all_cpus}
    assert topo.numa_memory_bytes == {} and topo.numa_distances == {}
    assert len(topo.core_cpus) == 8 and topo.sockets == [0, 1]


def test_no_cache_dirs_means_l3_is_the_socket(tree: Path) -> None:
    for cache in sysdir(tree).glob("cpu/cpu*/cache"):
        shutil.rmtree(cache)
    found = discover_with_warnings(tree)
    assert len(found.warnings) == 1 and "L3" in found.warnings[0]
    assert all(c.l3 == c.socket for c in found.topology.cpus)


@pytest.mark.parametrize("tree", ["amd-multi-l3"], indirect=True)
def test_l3_without_id_files_is_numbered_from_shared_lists(tree: Path) -> None:
    for f in sysdir(tree).glob("cpu/cpu*/cache/index3/id"):
        f.unlink()
    found = discover_with_warnings(tree)
    assert len(found.warnings) == 1 and "shared_cpu_list" in found.warnings[0]
    assert found.topology.l3_cpus == {i: CPUSet(range(4 * i, 4 * i + 4)) for i in range(4)}


@pytest.mark.parametrize("tree", ["dual-socket-ht"], indirect=True)
def test_l3_ids_repeated_across_sockets_are_made_unique(tree: Path) -> None:
    for f in sysdir(tree).glob("cpu/cpu*/cache/index3/id"):
        f.write_text("0\n")
    found = discover_with_warnings(tree)
    topo = found.topology
    assert partition(topo.l3_cpus.values()) == partition(topo.socket_cpus.values())
    assert found.warnings == ()


def test_online_cpu_without_topology_dir_is_offline_as_in_hwloc(tree: Path) -> None:
    shutil.rmtree(sysdir(tree) / "cpu" / "cpu9" / "topology")  # sibling of 1, socket 0, node 0
    found = discover_with_warnings(tree)
    topo = found.topology
    assert len(found.warnings) == 1 and "no topology directory" in found.warnings[0]
    assert 9 not in topo.online and topo.siblings(1) == CPUSet([1])
    assert (topo.by_cpu[9].socket, topo.by_cpu[9].numa) == (0, 0)


def test_no_topology_dirs_at_all_means_a_core_per_cpu(tree: Path) -> None:
    for d in sysdir(tree).glob("cpu/cpu*/topology"):
        shutil.rmtree(d)
    found = discover_with_warnings(tree)
    assert found.topology.online == CPUSet.parse("0-15") and len(found.topology.core_cpus) == 16
    assert any("no CPU has a topology directory" in w for w in found.warnings)


def test_missing_online_offline_and_isolated_files(tree: Path) -> None:
    for name in ("online", "offline", "isolated"):
        (sysdir(tree) / "cpu" / name).unlink()
    found = discover_with_warnings(tree)
    assert len(found.warnings) == 2
    assert found.topology.online == found.topology.all_cpus == CPUSet.parse("0-15")


def test_missing_online_falls_back_to_offline(tmp_path: Path) -> None:
    tree = copy_fixture("offline-isolated", tmp_path)
    (sysdir(tree) / "cpu" / "online").unlink()
    found = discover_with_warnings(tree)
    assert len(found.warnings) == 1
    assert found.topology.all_cpus - found.topology.online == CPUSet.parse("3,6,11")


def test_missing_distance_uses_kernel_defaults(tree: Path) -> None:
    (sysdir(tree) / "node" / "node2" / "distance").unlink()
    found = discover_with_warnings(tree)
    assert len(found.warnings) == 1 and "distance" in found.warnings[0]
    assert found.topology.distance(0, 1) == 20 and found.topology.distance(1, 1) == 10


def test_partial_container_sysfs_warns_once_per_kind(tree: Path) -> None:
    for cache in sysdir(tree).glob("cpu/cpu*/cache"):
        shutil.rmtree(cache)
    for meminfo in sysdir(tree).glob("node/node*/meminfo"):
        meminfo.unlink()
    (sysdir(tree) / "cpu" / "isolated").unlink()
    found = discover_with_warnings(tree)
    assert len(found.warnings) == 3  # not one per CPU or per node
    assert found.topology.numa_memory_bytes == {}
    assert found.topology.isolated == CPUSet()
    assert len(found.topology.numa_nodes) == 4 and len(found.topology.core_cpus) == 8


def test_core_id_repeating_across_dies_is_renumbered(tmp_path: Path) -> None:
    shape = gen.Shape(cores_per_numa=4, dies_per_socket=2, core_id_scope="die")
    found = discover_with_warnings(gen.write_tree(tmp_path, shape))
    assert len(found.warnings) == 1 and "repeats" in found.warnings[0]
    assert_matches_shape(found.topology, shape)


def test_discover_logs_the_warnings(tree: Path, caplog: pytest.LogCaptureFixture) -> None:
    shutil.rmtree(sysdir(tree) / "node")
    with caplog.at_level(logging.WARNING, logger="nri_pinner.engine.topology.sysfs"):
        topo = discover(tree)
    assert topo.numa_nodes == [0]
    assert len(caplog.records) == 1 and "NUMA" in caplog.records[0].getMessage()


# -- garbage is repaired, one warning naming the file -------------------------------------
@pytest.mark.parametrize(
    ("relpath", "content", "expect"),
    [
        ("cpu/cpu4/topology/physical_package_id", "zero\n", "expected an integer"),
        ("cpu/cpu0/cache/index3/level", "three\n", "expected an integer"),
        ("node/node1/cpumap", "3-1\n", "expected a hex CPU mask"),
        ("cpu/online", "0-15,a\n", "expected a CPU list"),
        ("node/node1/distance", "11 10 21\n", "has 3 values for 4 nodes"),
        ("node/node1/distance", "11 ten 21 21\n", "has 1 values for 4 nodes"),
        ("node/node1/meminfo", "Node 1 MemFree: 12 kB\n", "MemTotal"),
    ],
)
def test_garbage_is_repaired_naming_the_file(tree: Path, relpath: str, content: str, expect: str) -> None:
    (sysdir(tree) / relpath).write_text(content)
    found = discover_with_warnings(tree)
    assert any(expect in w for w in found.warnings), found.warnings
    assert len(found.topology.all_cpus) == 16


def test_nul_and_whitespace_are_stripped(tree: Path) -> None:
    (sysdir(tree) / "cpu" / "online").write_bytes(b"  0-15\n\x00\x00")
    (sysdir(tree) / "node" / "node1" / "cpumap").write_bytes(b"00000c0c\n\x00")
    found = discover_with_warnings(tree)
    assert found.warnings == () and found.topology.numa_cpus[1] == CPUSet.parse("2-3,10-11")


def test_non_text_file_is_ignored_naming_it(tree: Path) -> None:
    path = sysdir(tree) / "cpu" / "cpu0" / "topology" / "physical_package_id"
    path.write_bytes(b"\xff\xfe\x00")
    found = discover_with_warnings(tree)
    assert any("physical_package_id" in w for w in found.warnings)


def test_cpu_in_two_nodes_stays_in_the_first(tree: Path) -> None:
    (sysdir(tree) / "node" / "node1" / "cpumap").write_text("00000c0d\n")  # 0,2-3,10-11
    found = discover_with_warnings(tree)
    assert found.warnings == ("CPU 0 is listed in NUMA nodes [0, 1]: kept in node 0",)
    assert found.topology.by_cpu[0].numa == 0


def test_sibling_list_without_the_cpu_itself_is_cut(tree: Path) -> None:
    topo = sysdir(tree) / "cpu" / "cpu5" / "topology"
    for name in ("core_cpus_list", "thread_siblings_list", "core_cpus", "thread_siblings"):
        (topo / name).write_text("4,12\n" if name.endswith("list") else "1010\n")
    found = discover_with_warnings(tree)
    # CPU 5's set names only CPUs already placed with CPU 4; 13's set starts with 5, already placed
    assert found.topology.siblings(5) == CPUSet([5]) and found.topology.siblings(13) == CPUSet([13])
    assert found.topology.siblings(4) == CPUSet([4, 12])
    assert "CPUs 5 missing from their own set" in found.warnings[0]  # then core_id 5 repeats: renumbered


def test_online_and_offline_overlap_trusts_online(tree: Path) -> None:
    (sysdir(tree) / "cpu" / "offline").write_text("3\n")
    assert 3 in discover(tree).online


def test_no_cpu_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(SysfsError, match="no CPU directory"):
        discover(tmp_path)


def test_mask_wins_over_list_as_in_hwloc(tree: Path) -> None:
    (sysdir(tree) / "node" / "node1" / "cpulist").write_text("0-15\n")  # the mask says 2-3,10-11
    assert discover(tree).numa_cpus[1] == CPUSet.parse("2-3,10-11")


def test_list_used_when_the_mask_is_missing(tree: Path) -> None:
    (sysdir(tree) / "node" / "node1" / "cpumap").unlink()
    assert discover(tree).numa_cpus[1] == CPUSet.parse("2-3,10-11")


def test_compute_units_are_one_core_per_cpu(tree: Path) -> None:
    (sysdir(tree) / "cpu" / "cpu8" / "topology" / "core_id").write_text("9\n")  # 0 and 8: siblings, own ids
    found = discover_with_warnings(tree)
    assert found.sources["cores"].startswith("core_id (compute units)")
    assert found.topology.siblings(0) == CPUSet([0])


def test_long_distance_rows_are_read_by_node_id(tmp_path: Path) -> None:
    root = gen.write_tree(tmp_path, gen.Shape(sockets=2, cores_per_numa=2, first_node=1))
    node_dir = sysdir(root) / "node"
    (node_dir / "node1" / "distance").write_text("10 10 21\n")  # columns 0 (offline node), 1, 2
    (node_dir / "node2" / "distance").write_text("10 21 10\n")
    topo = discover(root)
    assert topo.distance(1, 2) == 21 and topo.distance(1, 1) == 10


def test_a_tree_naming_no_cpu_raises(tmp_path: Path) -> None:
    (sysdir(tmp_path) / "cpu").mkdir(parents=True)
    with pytest.raises(SysfsError, match="no CPUs under"):
        discover(tmp_path)
