#!/usr/bin/env python3
"""Add PCI devices, VFIO groups and hugepages to a sysfs tree written by ``gen_sysfs.write_tree``.

Only the files ``nri_pinner.engine.topology.pci`` and ``topology.memory`` read, with the
kernel's shapes: ``/sys/dev/{char,block}/MAJ:MIN`` symlinks into ``/sys/devices/pci*/…``,
``device`` and ``driver`` links, ``numa_node`` (-1 = no affinity), ``local_cpulist``,
``/sys/bus/pci/devices/ADDR`` and ``/sys/kernel/iommu_groups/N/devices/ADDR`` links. Tests
import this file by path, like ``gen_sysfs.py``.
"""

from __future__ import annotations

import os
from pathlib import Path


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


def pci_dir(root: Path | str, address: str) -> Path:
    bus = address.rsplit(":", 1)[0]
    return Path(root) / "sys" / "devices" / f"pci{bus}" / address


def add_pci_device(root: Path | str, address: str, *, numa: int, driver: str = "",
                   local_cpulist: str = "") -> Path:
    """A PCI function on ``numa`` (-1: firmware gave no affinity), bound to ``driver``."""
    root = Path(root)
    d = pci_dir(root, address)
    _put(d / "numa_node", str(numa))
    _put(d / "local_cpulist", local_cpulist)
    _put(d / "class", "0x030200")
    if driver:
        drv = root / "sys" / "bus" / "pci" / "drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        _link(d / "driver", drv)
    _link(root / "sys" / "bus" / "pci" / "devices" / address, d)
    return d


def add_char_device(root: Path | str, major: int, minor: int, *, parent: Path | None, cls: str,
                    name: str) -> Path:
    """A character device (``/sys/class/<cls>/<name>``) under ``parent`` (None = virtual)."""
    root = Path(root)
    base = parent if parent is not None else root / "sys" / "devices" / "virtual"
    d = base / cls / name
    _put(d / "dev", f"{major}:{minor}")
    subsystem = root / "sys" / "class" / cls
    subsystem.mkdir(parents=True, exist_ok=True)
    _link(d / "subsystem", subsystem)
    if parent is not None:
        _link(d / "device", parent)
    _link(root / "sys" / "dev" / "char" / f"{major}:{minor}", d)
    return d


def add_nvme(root: Path | str, address: str, controller: int, major: int, minor: int, *, numa: int) -> Path:
    """An NVMe controller at ``address`` with namespace 1 as block device ``major:minor``."""
    root = Path(root)
    pci = add_pci_device(root, address, numa=numa, driver="nvme")
    ctrl = pci / "nvme" / f"nvme{controller}"
    _put(ctrl / "dev", f"240:{controller}")
    _link(ctrl / "device", pci)
    ns = ctrl / f"nvme{controller}n1"
    _put(ns / "dev", f"{major}:{minor}")
    _link(ns / "device", ctrl)
    block = root / "sys" / "class" / "block"
    block.mkdir(parents=True, exist_ok=True)
    _link(ns / "subsystem", block)
    _link(root / "sys" / "dev" / "block" / f"{major}:{minor}", ns)
    return ns


def add_vfio_group(root: Path | str, group: int, addresses: list[str]) -> Path:
    """IOMMU group ``group`` holding the (already added) PCI functions ``addresses``."""
    root = Path(root)
    g = root / "sys" / "kernel" / "iommu_groups" / str(group) / "devices"
    g.mkdir(parents=True, exist_ok=True)
    for address in addresses:
        _link(g / address, pci_dir(root, address))
    return g


def add_hugepages(root: Path | str, node: int, page_kib: int, pages: int) -> Path:
    d = Path(root) / "sys" / "devices" / "system" / "node" / f"node{node}" / "hugepages" / f"hugepages-{page_kib}kB"
    _put(d / "nr_hugepages", str(pages))
    _put(d / "free_hugepages", str(pages))
    return d


def gpu_box(root: Path | str) -> Path:
    """Two CPU NUMA nodes plus memory-only node 2 (write the CPU tree first): a GPU on each CPU
    node (char 195:0 on node 0, 195:1 on node 1), an NVMe on node 1 (block 259:0), a NIC VF in
    VFIO group 12 on node 0, a device with no affinity (char 195:2) and hugepages on nodes 0-1."""
    root = Path(root)
    for i, (addr, numa) in enumerate((("0000:3b:00.0", 0), ("0000:af:00.0", 1), ("0000:d8:00.0", -1))):
        pci = add_pci_device(root, addr, numa=numa, driver="nvidia",
                             local_cpulist={0: "0-3,8-11", 1: "4-7,12-15"}.get(numa, ""))
        add_char_device(root, 195, i, parent=pci, cls="nvidia-gpu", name=f"nvidia{i}")
    add_nvme(root, "0000:5e:00.0", 0, 259, 0, numa=1)
    add_pci_device(root, "0000:18:02.1", numa=0, driver="vfio-pci", local_cpulist="0-3,8-11")
    add_vfio_group(root, 12, ["0000:18:02.1"])
    add_char_device(root, 1, 3, parent=None, cls="mem", name="null")
    add_hugepages(root, 0, 2048, 512)
    add_hugepages(root, 1, 2048, 512)
    add_hugepages(root, 0, 1048576, 2)
    return root
