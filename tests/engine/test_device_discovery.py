"""Device and memory discovery on generated sysfs trees (scripts/gen_sysfs*.py, real files and symlinks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.memory import MemoryDiscoveryError, read_node_memory
from nri_pinner.engine.topology.pci import DeviceResolver
from testkit.scripts import load_script

gen = load_script("gen_sysfs")
devgen = load_script("gen_sysfs_devices")


@pytest.fixture
def box(tmp_path: Path) -> Path:
    gen.write_tree(tmp_path, gen.Shape(sockets=2, cores_per_numa=4, cpuless_nodes=1, l1_l2_files=False))
    devgen.gpu_box(tmp_path)
    return tmp_path


def test_char_devices_resolve_to_their_pci_numa_node(box: Path) -> None:
    r = DeviceResolver(box)
    gpu0, gpu1, gpu2 = (r.resolve("c", 195, i) for i in range(3))
    assert gpu0 is not None and gpu0.numa == frozenset({0}) and gpu0.driver == "nvidia"
    assert gpu0.pci == ("0000:3b:00.0",) and gpu0.local_cpus == CPUSet.parse("0-3,8-11")
    assert gpu1 is not None and gpu1.numa == frozenset({1})
    assert gpu2 is not None and gpu2.numa is None  # numa_node -1: no affinity


def test_nvme_block_device_walks_up_through_the_controller(box: Path) -> None:
    nvme = DeviceResolver(box).resolve("b", 259, 0)
    assert nvme is not None and nvme.numa == frozenset({1}) and nvme.driver == "nvme"
    assert nvme.id == "b259:0"


def test_vfio_group_uses_iommu_group_members(box: Path) -> None:
    vf = DeviceResolver(box).resolve("c", 511, 0, "/dev/vfio/12")
    assert vf is not None and vf.numa == frozenset({0}) and vf.driver == "vfio-pci"
    assert DeviceResolver(box).resolve("c", 511, 1, "/dev/vfio/99") is None


def test_virtual_device_has_no_affinity_and_missing_node_is_none(box: Path) -> None:
    r = DeviceResolver(box)
    null = r.resolve("c", 1, 3)
    assert null is not None and null.numa is None and null.driver == "mem"
    assert r.resolve("c", 42, 42) is None
    assert r.resolve("x", 1, 3) is None


def test_pci_address_lookup(box: Path) -> None:
    r = DeviceResolver(box)
    found = r.pci_device("0000:af:00.0")
    assert found is not None and found.numa == frozenset({1})
    assert r.pci_device("0000:00:00.0") is None
    with pytest.raises(ValueError, match="not a PCI address"):
        r.pci_device("af:00")


def test_node_memory_with_hugepages_and_a_memory_only_node(box: Path) -> None:
    nodes = {n.node: n for n in read_node_memory(box)}
    assert sorted(nodes) == [0, 1, 2]
    assert nodes[0].hugepages == {2 << 20: 512 * (2 << 20), 1 << 30: 2 << 30}
    assert nodes[1].hugepages == {2 << 20: 512 * (2 << 20)}
    assert nodes[2].has_cpus is False and nodes[0].has_cpus is True
    assert nodes[0].memory_bytes == 8 * 1024 * 1024 * 1024


def test_bad_meminfo_is_named(box: Path) -> None:
    (box / "sys/devices/system/node/node1/meminfo").write_text("garbage\n")
    with pytest.raises(MemoryDiscoveryError, match="node1/meminfo"):
        read_node_memory(box)
    assert read_node_memory(box / "nowhere") == []


def test_this_host_resolves_dev_null_without_affinity() -> None:
    null = DeviceResolver("/").resolve("c", 1, 3)
    assert null is not None and null.numa is None
