"""Network device → PCI function → NUMA node on fixture sysfs trees (this VM has no SR-IOV NIC and one
NUMA node, so PFs, VFs and NUMA nodes come from trees built here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from nic_fixtures import fixture_sysfs

from nri_pinner.engine.topology.nic_pci import (
    NicPCIError,
    normalize_pci_address,
    numa_node_of_pci,
    pci_address_of,
    place_device,
)


@pytest.fixture
def root(tmp_path: Path) -> str:
    return fixture_sysfs(
        tmp_path, {"0000:3b:00.0": 1, "0000:3b:02.1": 1, "0000:af:00.0": 0, "0000:00:03.0": -1},
        bus_devices={("virtio", "virtio2"): "0000:00:03.0", ("virtio", "virtio5"): "0000:af:00.0"},
        vfs={"0000:3b:02.1": "0000:3b:00.0"})


def test_pf_vf_and_virtio_devices_resolve_to_their_numa_node(root: str) -> None:
    assert place_device(root, "pci", "0000:3b:00.0").numa == 1
    vf = place_device(root, "pci", "0000:3b:02.1")
    assert (vf.pci, vf.numa, vf.vf) == ("0000:3b:02.1", 1, True)
    assert place_device(root, "pci", "0000:3b:00.0").vf is False
    virtio = place_device(root, "virtio", "virtio5")
    assert (virtio.pci, virtio.numa) == ("0000:af:00.0", 0)


def test_minus_one_absent_and_non_pci_give_no_node_with_a_note(root: str) -> None:
    none = place_device(root, "virtio", "virtio2")
    assert (none.pci, none.numa) == ("0000:00:03.0", None) and "no NUMA affinity" in none.note
    assert numa_node_of_pci(root, "0000:99:00.0") is None  # not in the tree
    assert place_device(root, "virtio", "virtio9").note == "parent device virtio/virtio9 is not on PCI"
    assert place_device(root, None, None).note.startswith("no parent device")
    assert pci_address_of(root, "..", "x") is None and pci_address_of(root, "virtio", "../../etc") is None


def test_unreadable_numa_node_counts_as_none(tmp_path: Path) -> None:
    root = fixture_sysfs(tmp_path, {"0000:3b:00.0": 0})
    (tmp_path / "sys/devices/pci0000:00/0000:3b:00.0/numa_node").write_text("garbage\n")
    assert numa_node_of_pci(root, "0000:3b:00.0") is None


def test_pci_addresses_are_normalized_or_refused() -> None:
    assert normalize_pci_address("3B:00.1") == "0000:3b:00.1"
    assert normalize_pci_address(" 0000:AF:00.0 ") == "0000:af:00.0"
    for bad in ("eth0", "0000:3b:00.8", "3b:00", ""):
        with pytest.raises(NicPCIError, match="not a PCI address"):
            normalize_pci_address(bad)
