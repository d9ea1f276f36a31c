"""Device → PCI → NUMA discovery from sysfs (engine I/O lives in topology/ only).

A container's device (``linux.devices``: type, major, minor, path) is found under
``/sys/dev/{char,block}/MAJ:MIN``; walking up from its real path reaches the PCI function
that carries ``numa_node`` (-1 = no affinity) and ``local_cpulist``. VFIO group nodes
(``/dev/vfio/N``) map to ``/sys/kernel/iommu_groups/N/devices/*``. A device with no sysfs
node is reported as missing (the caller warns once); a device with a sysfs node but no PCI
parent (``/dev/null``, loop devices) has no affinity, like the kubelet's devices without
topology.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..cpuset import CPUSet, CPUSetError

PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
VFIO_GROUP = re.compile(r"^/dev/vfio/(\d+)$")


@dataclass(frozen=True, slots=True)
class DeviceTopology:
    """Where one device sits. ``numa`` is None for no affinity; ``driver`` names the resource
    when nothing better (device-plugin env/annotations) is known."""

    id: str  # "c195:0", "b259:0", "vfio:12" or a PCI address
    numa: frozenset[int] | None
    pci: tuple[str, ...] = ()
    driver: str = ""
    local_cpus: CPUSet | None = None

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "numa": None if self.numa is None else sorted(self.numa),
                "pci": list(self.pci), "driver": self.driver,
                "local_cpus": None if self.local_cpus is None else str(self.local_cpus)}


class DeviceResolver:
    """Resolves devices under ``root`` and caches the answers (sysfs device placement is static)."""

    def __init__(self, root: str | Path = "/") -> None:
        self.sys = Path(root) / "sys"
        self._cache: dict[tuple[str, int, int, str], DeviceTopology | None] = {}

    def resolve(self, kind: str, major: int, minor: int, path: str = "") -> DeviceTopology | None:
        """``kind`` is "c" or "b"; None when sysfs has no node for the device."""
        key = (kind, major, minor, path)
        if key not in self._cache:
            self._cache[key] = self._resolve(kind, major, minor, path)
        return self._cache[key]

    def _resolve(self, kind: str, major: int, minor: int, path: str) -> DeviceTopology | None:
        group = VFIO_GROUP.match(path)
        if group:
            return self.vfio_group(int(group.group(1)))
        sub = {"c": "char", "b": "block"}.get(kind)
        if sub is None:
            return None
        node = self.sys / "dev" / sub / f"{major}:{minor}"
        if not node.exists():
            return None
        real = Path(os.path.realpath(node))
        dev_id = f"{kind}{major}:{minor}"
        pci = self._pci_parent(real)
        if pci is None:
            return DeviceTopology(dev_id, None, driver=_link_name(real / "subsystem") or sub)
        numa, driver, local = self._pci_facts(pci)
        return DeviceTopology(dev_id, numa, (pci.name,), driver, local)

    def pci_device(self, address: str) -> DeviceTopology | None:
        """A PCI function by address (``0000:3b:00.0``), e.g. from a CDI spec or ``simulate``."""
        if not PCI_ADDRESS.match(address):
            raise ValueError(f"not a PCI address: {address!r} (want DDDD:BB:DD.F)")
        link = self.sys / "bus" / "pci" / "devices" / address
        if not link.exists():
            return None
        numa, driver, local = self._pci_facts(Path(os.path.realpath(link)))
        return DeviceTopology(address, numa, (address,), driver, local)

    def vfio_group(self, group: int) -> DeviceTopology | None:
        devices = self.sys / "kernel" / "iommu_groups" / str(group) / "devices"
        try:
            names = sorted(os.listdir(devices))
        except OSError:
            return None
        nodes: set[int] = set()
        local = None
        drivers: set[str] = set()
        for name in names:
            numa, driver, cpus = self._pci_facts(Path(os.path.realpath(devices / name)))
            nodes |= numa or set()
            drivers.add(driver)
            local = cpus if local is None else (local | cpus if cpus is not None else local)
        driver = drivers.pop() if len(drivers) == 1 else "vfio-pci"
        return DeviceTopology(f"vfio:{group}", frozenset(nodes) or None, tuple(names), driver, local)

    def _pci_parent(self, real: Path) -> Path | None:
        devices_root = self.sys / "devices"
        here = real
        while here != here.parent and here != devices_root:
            if PCI_ADDRESS.match(here.name) and (here / "numa_node").exists():
                return here
            here = here.parent
        return None

    @staticmethod
    def _pci_facts(pci: Path) -> tuple[frozenset[int] | None, str, CPUSet | None]:
        try:
            node = int((pci / "numa_node").read_text().strip())
        except (OSError, ValueError):
            node = -1
        try:
            local: CPUSet | None = CPUSet.parse((pci / "local_cpulist").read_text().strip())
        except (OSError, CPUSetError):
            local = None
        numa = frozenset({node}) if node >= 0 else None
        return numa, _link_name(pci / "driver"), local


def _link_name(link: Path) -> str:
    try:
        return os.path.basename(os.readlink(link))
    except OSError:
        return ""
