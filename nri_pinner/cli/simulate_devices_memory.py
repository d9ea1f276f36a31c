"""``simulate`` inputs for the device and memory providers.

Topology JSON may add ``devices`` (``[{"pci": "0000:3b:00.0", "char": "195:0", "numa": 1,
"driver": "nvidia"}]``; ``"block": "259:0"``, ``"vfio": 12``; ``numa`` null = no affinity),
``numa_hugepages`` (``{"0": {"hugepages-2Mi": bytes}}``) and, for memory-only nodes listed in
``numa_memory_bytes``, ``numa_memory_distances`` (``{"2": {"0": 30, "1": 15}}``). Without a
topology object, devices are resolved from the ``--sysfs`` tree. A create op may carry
``devices`` (references like ``{"char": "195:0"}``, ``{"pci": "..."}``, optional ``resource``),
``memory_bytes`` and ``hugepages`` (``{"hugepages-2Mi": bytes}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import Settings
from ..engine.devicemanager.hints import Device
from ..engine.memorymanager.policy import StaticMemoryPolicy
from ..engine.memorymanager.provider import build_policy, parse_reserved_memory
from ..engine.memorymanager.state import MEMORY
from ..engine.topology.model import Topology
from ..engine.topology.pci import DeviceResolver, DeviceTopology


class AlignmentInputError(ValueError):
    """A device or memory input that cannot be used; the message names it."""


class DeviceIndex:
    """Device references → topology, from the scenario's topology JSON or from a sysfs tree."""

    def __init__(self, topology: Mapping[str, Any] | None, sysfs_root: str | None) -> None:
        self._by_ref: dict[tuple[str, str], DeviceTopology] = {}
        self._resolver = DeviceResolver(sysfs_root) if topology is None and sysfs_root is not None else None
        for i, d in enumerate((topology or {}).get("devices") or []):
            if not isinstance(d, Mapping):
                raise AlignmentInputError(f"topology.devices[{i}] must be an object")
            numa = d.get("numa")
            if numa is not None and (not isinstance(numa, int) or isinstance(numa, bool) or numa < 0):
                raise AlignmentInputError(f"topology.devices[{i}].numa must be a NUMA node id or null")
            refs = [(k, str(d[k])) for k in ("pci", "char", "block", "vfio") if k in d]
            if not refs:
                raise AlignmentInputError(f"topology.devices[{i}] needs pci, char, block or vfio")
            dev = DeviceTopology(f"{refs[0][0]}:{refs[0][1]}", None if numa is None else frozenset({numa}),
                                 (str(d["pci"]),) if "pci" in d else (), str(d.get("driver", "")))
            for ref in refs:
                self._by_ref[ref] = dev

    def lookup(self, ref: Mapping[str, Any], where: str) -> DeviceTopology:
        keys = [k for k in ("pci", "char", "block", "vfio") if k in ref]
        if len(keys) != 1 or set(ref) - {keys[0] if keys else "", "resource"}:
            raise AlignmentInputError(f"{where}: a device is one of pci, char, block, vfio (+ resource)")
        key, value = keys[0], str(ref[keys[0]])
        found = self._by_ref.get((key, value))
        if found is None and self._resolver is not None:
            found = self._resolve(key, value, where)
        if found is None:
            raise AlignmentInputError(f"{where}: no device {key} {value} in the topology")
        return found

    def _resolve(self, key: str, value: str, where: str) -> DeviceTopology | None:
        assert self._resolver is not None
        if key == "pci":
            try:
                return self._resolver.pci_device(value)
            except ValueError as exc:
                raise AlignmentInputError(f"{where}: {exc}") from exc
        if key == "vfio":
            return self._resolver.vfio_group(int(value)) if value.isdigit() else None
        major, sep, minor = value.partition(":")
        if not (sep and major.isdigit() and minor.isdigit()):
            raise AlignmentInputError(f"{where}: {key} must be MAJOR:MINOR, got {value!r}")
        return self._resolver.resolve(key[0], int(major), int(minor))


def op_devices(index: DeviceIndex, refs: Any, where: str) -> dict[str, list[Device]]:
    if not isinstance(refs, list):
        raise AlignmentInputError(f"{where}.devices must be a list of device references")
    out: dict[str, list[Device]] = {}
    for i, ref in enumerate(refs):
        if not isinstance(ref, Mapping):
            raise AlignmentInputError(f"{where}.devices[{i}] must be an object like {{\"char\": \"195:0\"}}")
        found = index.lookup(ref, f"{where}.devices[{i}]")
        resource = str(ref.get("resource") or found.driver or "device")
        out.setdefault(resource, []).append(Device(found.id, found.numa))
    return out


def op_memory(op: Mapping[str, Any], where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    mem = op.get("memory_bytes", 0)
    if not isinstance(mem, int) or isinstance(mem, bool) or mem < 0:
        raise AlignmentInputError(f"{where}: 'memory_bytes' must be a non-negative integer")
    if mem:
        out[MEMORY] = mem
    huge = op.get("hugepages", {})
    if not isinstance(huge, Mapping):
        raise AlignmentInputError(f"{where}: 'hugepages' must be an object like {{\"hugepages-2Mi\": bytes}}")
    for name, size in huge.items():
        if not str(name).startswith("hugepages-") or not isinstance(size, int) or size < 0:
            raise AlignmentInputError(f"{where}: hugepages entry {name!r}: {size!r} (want hugepages-<size>: bytes)")
        if size:
            out[str(name)] = size
    return out


def scenario_memory_policy(settings: Settings, topology: Topology, data: Mapping[str, Any] | None,
                           sysfs_root: str | None) -> StaticMemoryPolicy | None:
    if "memory" not in settings.hints.providers:
        return None
    reserved = parse_reserved_memory(settings.memory_manager.reserved_memory)
    if data is None and sysfs_root is not None:
        from ..edge.request_intake import memory_policy
        return memory_policy(settings, topology)
    data = data or {}
    memory = {int(k): int(v) for k, v in (data.get("numa_memory_bytes") or {}).items()}
    huge = {int(n): {str(k): int(v) for k, v in table.items()}
            for n, table in (data.get("numa_hugepages") or {}).items()}
    dist = {int(n): {int(k): int(v) for k, v in row.items()}
            for n, row in (data.get("numa_memory_distances") or {}).items()}
    try:
        return build_policy(topology.numa_nodes, memory, huge, reserved, dist)
    except (ValueError, AttributeError) as exc:
        raise AlignmentInputError(f"memory provider: {exc}") from exc
