"""Network device → PCI address → NUMA node, read from a sysfs root.

Netlink names a link's parent device by bus and name (``pci`` / ``0000:3b:00.2`` for a NIC or an
SR-IOV VF, ``virtio`` / ``virtio2`` for a virtio-net NIC whose PCI function is one level up). The
bus directories under ``/sys/bus`` are global, unlike ``/sys/class/net``, which shows only the
reader's own network namespace; so the lookup inside a pod's namespace gives (bus, name) and this
module resolves them on the host. ``numa_node`` of ``-1`` means "no NUMA affinity".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
SHORT_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


class NicPCIError(ValueError):
    """A PCI address that is not one (the message says which and why)."""


def normalize_pci_address(text: str) -> str:
    """``0000:3b:00.0`` form, lower case; ``3b:00.0`` gets domain 0000 (as ``lspci`` prints it)."""
    t = text.strip()
    if SHORT_PCI_ADDRESS.match(t):
        t = "0000:" + t
    if not PCI_ADDRESS.match(t):
        raise NicPCIError(f"not a PCI address: {text!r} (expected DDDD:BB:DD.F, e.g. 0000:3b:00.0)")
    return t.lower()


@dataclass(frozen=True)
class PCIPlacement:
    """Where one network device sits: its PCI function and NUMA node (``None`` = no affinity)."""

    pci: str | None
    numa: int | None
    note: str = ""  # why there is no PCI address or no NUMA node
    vf: bool = False  # an SR-IOV virtual function (it has a ``physfn`` link)


def _sys(root: str, *parts: str) -> str:
    return os.path.join(root, "sys", *parts)


def pci_address_of(root: str, bus: str, name: str) -> str | None:
    """The PCI function of a bus device: itself on the ``pci`` bus, else its nearest PCI ancestor."""
    if bus == "pci":
        try:
            return normalize_pci_address(name)
        except NicPCIError:
            return None
    if not bus or not name or "/" in bus or "/" in name or bus in (".", "..") or name in (".", ".."):
        return None
    link = _sys(root, "bus", bus, "devices", name)
    if not os.path.lexists(link):
        return None
    real = os.path.realpath(link)
    for part in reversed(real.split(os.sep)):
        if PCI_ADDRESS.match(part):
            return part.lower()
    return None


def numa_node_of_pci(root: str, address: str) -> int | None:
    """``/sys/bus/pci/devices/<address>/numa_node``; ``None`` for -1, absent or unreadable."""
    path = _sys(root, "bus", "pci", "devices", normalize_pci_address(address), "numa_node")
    try:
        with open(path, encoding="ascii") as f:
            value = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def place_device(root: str, bus: str | None, name: str | None) -> PCIPlacement:
    """(bus, name) of a link's parent device → PCI address and NUMA node, with a note when either is missing."""
    if not bus or not name:
        return PCIPlacement(None, None, "no parent device (virtual link)")
    pci = pci_address_of(root, bus, name)
    if pci is None:
        return PCIPlacement(None, None, f"parent device {bus}/{name} is not on PCI")
    numa = numa_node_of_pci(root, pci)
    vf = os.path.lexists(_sys(root, "bus", "pci", "devices", pci, "physfn"))
    if numa is None:
        return PCIPlacement(pci, None, f"PCI device {pci} has no NUMA affinity", vf)
    return PCIPlacement(pci, numa, vf=vf)
