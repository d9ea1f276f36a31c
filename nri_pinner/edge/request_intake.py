"""What a container brings to device and memory alignment, read from its NRI data.

Devices: ``linux.devices`` (type, major, minor, path; NRI v0.6.1+) resolved through sysfs to
their PCI function and NUMA node (cached: device placement does not change while the node
runs). Only PCI-backed devices count: ``/dev/null``-like virtual devices are no resource. A
device with no sysfs node gets no hint and one warning. Devices are grouped by resource name:
the SR-IOV device plugin's ``PCIDEVICE_<RESOURCE>=<pci addresses>`` environment, else the one
CDI device class the container asks for (``Container.CDI_devices``, NRI v0.10+:
``vendor.com/class=name``), else the driver (``nvidia``, ``vfio-pci``, ``nvme``…).

Memory: a Guaranteed container's memory limit and hugepage limits (bytes) from
``linux.resources``; hugepage sizes use the kubelet's names (``hugepages-2Mi``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from ..config import Settings
from ..engine.decision import AdmissionExtras
from ..engine.devicemanager.hints import Device
from ..engine.devicemanager.podresources import without_reported
from ..engine.memory_policy import memory_policy as build_memory_policy
from ..engine.memorymanager.policy import StaticMemoryPolicy
from ..engine.memorymanager.state import MEMORY, hugepage_resource
from ..engine.topology.memory import read_node_memory
from ..engine.topology.model import Topology
from ..engine.topology.pci import DeviceResolver, DeviceTopology
from .clients.podresources import PodResources

log = structlog.get_logger("nri_pinner.service")

_PAGE_UNITS = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def memory_policy(settings: Settings, topology: Topology) -> StaticMemoryPolicy | None:
    """The static Memory Manager when the "memory" provider is on (engine/memory_policy.py), its
    capacities read from sysfs."""
    return build_memory_policy(settings, topology, lambda: read_node_memory(settings.sysfs_root))


def page_size_bytes(text: str) -> int:
    """OCI hugepage size ("2MB", "1GB", "64KB") in bytes."""
    unit = text[-2:].upper()
    if unit not in _PAGE_UNITS or not text[:-2].isdigit():
        raise ValueError(f"unknown hugepage size {text!r}")
    return int(text[:-2]) * _PAGE_UNITS[unit]


class Intake:
    def __init__(self, settings: Settings, warn: Callable[..., Any] | None = None) -> None:
        self.devices_on = "devices" in settings.hints.providers
        self.memory_on = "memory" in settings.hints.providers
        self.resolver = DeviceResolver(settings.sysfs_root)
        self._warn = warn or log.warning
        self._warned: set[tuple[str, int, int]] = set()
        self.podresources: PodResources | None = None  # set by the service when that provider is on

    def pod_started(self, pod: Any) -> None:
        """RunPodSandbox: PodResources lists again (the kubelet allocated the pod's devices on admission)."""
        if self.podresources is not None:
            self.podresources.pod_started(pod)

    def devices(self, container: Any) -> dict[str, list[Device]]:
        """``{resource: devices}`` for the container's PCI-backed device nodes."""
        if not self.devices_on:
            return {}
        by_env = _pcidevice_env(container.env)
        cdi = sorted({d.name.split("=", 1)[0] for d in getattr(container, "CDI_devices", ()) if "=" in d.name})
        out: dict[str, list[Device]] = {}
        seen: set[str] = set()
        for dev in container.linux.devices:
            found = self.resolver.resolve(dev.type, int(dev.major), int(dev.minor), dev.path)
            if found is None:
                key = (dev.type, int(dev.major), int(dev.minor))
                if key not in self._warned:
                    self._warned.add(key)
                    self._warn("device has no sysfs node: no NUMA hint for it", path=dev.path,
                               device=f"{dev.type} {dev.major}:{dev.minor}")
                continue
            if not found.pci or found.id in seen:
                continue
            seen.add(found.id)
            out.setdefault(_resource(found, by_env, cdi), []).append(Device(found.id, found.numa))
        return out

    def extras(self, container: Any, guaranteed: bool) -> AdmissionExtras:
        """``AdmissionRequest`` keyword arguments for the device and memory providers."""
        out: AdmissionExtras = {}
        devices = self.devices(container)
        if self.podresources is not None:  # a device PodResources reports gets its hints there, not twice
            devices = without_reported(devices, self.podresources.reported(container))
        if devices:
            out["devices"] = devices
        memory = self.memory(container, guaranteed)
        if memory:
            out["memory"] = memory
        return out

    def memory(self, container: Any, guaranteed: bool) -> dict[str, int]:
        """Memory and hugepage limits (bytes) of a Guaranteed container; {} otherwise."""
        if not (self.memory_on and guaranteed):
            return {}
        res = container.linux.resources
        out: dict[str, int] = {}
        if res.HasField("memory") and res.memory.HasField("limit") and res.memory.limit.value > 0:
            out[MEMORY] = res.memory.limit.value
        for hp in res.hugepage_limits:
            try:
                size = page_size_bytes(hp.page_size)
            except ValueError as exc:
                self._warn("hugepage limit ignored", error=str(exc))
                continue
            if hp.limit > 0:
                out[hugepage_resource(size)] = int(hp.limit)
        return out


def _pcidevice_env(env: Any) -> dict[str, str]:
    """SR-IOV device plugin: ``PCIDEVICE_INTEL_COM_SRIOV=0000:18:02.1,0000:18:02.2`` -> address -> name."""
    out: dict[str, str] = {}
    for item in env:
        name, sep, value = item.partition("=")
        if sep and name.startswith("PCIDEVICE_") and not name.endswith("_INFO"):
            for addr in value.split(","):
                if addr.strip():
                    out[addr.strip()] = name[len("PCIDEVICE_"):].lower()
    return out


def _resource(found: DeviceTopology, by_env: dict[str, str], cdi: list[str]) -> str:
    for addr in found.pci:
        if addr in by_env:
            return by_env[addr]
    if len(cdi) == 1:
        return cdi[0]
    return found.driver or "unknown"
