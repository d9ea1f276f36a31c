"""Device topology hints: the kubelet device manager's rules, over devices we resolved from sysfs.

The kubelet (``generateDeviceTopologyHints``) walks every NUMA mask: a mask is a hint when
every reusable device with a topology lies on it and enough *available* devices touch it
(a device counts for a mask when any of its NUMA nodes is in the mask; a device without a
topology counts for none); a hint is preferred when its size equals the fewest NUMA nodes
whose devices (all of them, free or not) could hold the request. A resource none of whose
devices reports a topology has no preference (``None``).

When every device sits on at most one node and nothing is reusable, that hint set is the
same up-set as the CPU one ("weight of the mask >= request"), so it is returned as a
:class:`CPUTopologyHints` and the merge never enumerates the 2^N masks of large machines.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..topologymanager.cpu_hints import CPUTopologyHints
from ..topologymanager.hints import ResourceHints, TopologyHint, mask_of


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a resource; ``numa`` None = no topology (sysfs ``numa_node`` of -1)."""

    id: str
    numa: frozenset[int] | None = None

    @property
    def mask(self) -> int:
        return mask_of(self.numa) if self.numa else 0


def device_hints(numa_nodes: Sequence[int], all_devices: Iterable[Device], available: Iterable[str],
                 reusable: Iterable[str], request: int) -> Sequence[TopologyHint]:
    """The kubelet's ``generateDeviceTopologyHints`` for one resource."""
    devices = {d.id: d for d in all_devices}
    universe = mask_of(numa_nodes)
    avail = [devices[i].mask & universe for i in available if i in devices]
    reuse = [devices[i].mask & universe for i in reusable if i in devices and devices[i].numa]
    all_masks = [d.mask & universe for d in devices.values()]
    simple = all(m.bit_count() <= 1 for m in all_masks) and not reuse
    if simple:
        weights = {n: 0 for n in numa_nodes}
        for m in avail:
            if m:
                weights[m.bit_length() - 1] += 1
        return CPUTopologyHints(node_weights=weights, required=0, threshold=max(request, 1),
                                min_affinity=_min_affinity_single(numa_nodes, all_masks, request),
                                node_sockets={n: 0 for n in numa_nodes}, min_sockets=None)
    min_affinity = _min_affinity(numa_nodes, all_masks, request)
    hints: list[TopologyHint] = []
    for mask in _all_masks(numa_nodes):
        if any(r & mask == 0 for r in reuse):
            continue
        matching = len(reuse) + sum(1 for m in avail if m & mask)
        if matching >= request:
            hints.append(TopologyHint(mask, mask.bit_count() == min_affinity))
    return tuple(hints)


def _min_affinity_single(numa_nodes: Sequence[int], all_masks: Sequence[int], request: int) -> int:
    """``_min_affinity`` when every device sits on at most one node: the fullest nodes first is exact."""
    per_node = sorted((sum(1 for m in all_masks if m == 1 << n) for n in numa_nodes), reverse=True)
    total = 0
    for size, count in enumerate(per_node, 1):
        total += count
        if total >= request:
            return size
    return len(numa_nodes)


def _min_affinity(numa_nodes: Sequence[int], all_masks: Sequence[int], request: int) -> int:
    best = len(numa_nodes)
    for mask in _all_masks(numa_nodes):
        if mask.bit_count() < best and sum(1 for m in all_masks if m & mask) >= request:
            best = mask.bit_count()
    return best


def _all_masks(numa_nodes: Sequence[int]) -> list[int]:
    """Every non-empty mask over ``numa_nodes`` in the kubelet's ``IterateBitMasks`` order (by size)."""
    nodes = sorted(numa_nodes)
    out: list[int] = []
    for size in range(1, len(nodes) + 1):
        out.extend(_combos(nodes, size))
    return out


def _combos(nodes: Sequence[int], size: int) -> list[int]:
    return [mask_of(c) for c in itertools.combinations(nodes, size)]


@dataclass(frozen=True)
class ResourceDevices:
    """What the kubelet knows about one resource: every healthy device and who holds which."""

    devices: tuple[Device, ...]
    allocated_elsewhere: frozenset[str] = frozenset()  # held by other containers
    allocated_here: frozenset[str] = frozenset()  # already held by this container
    reusable: frozenset[str] = frozenset()  # init-container devices this pod may reuse

    def has_topology(self) -> bool:
        return any(d.numa is not None for d in self.devices)


def resource_hints(numa_nodes: Sequence[int], resource: ResourceDevices,
                   requested: int) -> Sequence[TopologyHint] | None:
    """The kubelet's per-resource ``GetTopologyHints`` branch (None = no preference, () = impossible)."""
    if not resource.has_topology():
        return None
    if resource.allocated_here:
        if len(resource.allocated_here) != requested:
            return ()
        return device_hints(numa_nodes, resource.devices, resource.allocated_here, (), requested)
    ids = {d.id for d in resource.devices}
    available = ids - resource.allocated_elsewhere - resource.allocated_here
    if len(available | resource.reusable) < requested:
        return ()
    return device_hints(numa_nodes, resource.devices, sorted(available), sorted(resource.reusable), requested)


def filter_by_affinity(devices: Iterable[Device], available: Iterable[str],
                       affinity: int | None) -> tuple[list[str], list[str], list[str]]:
    """The kubelet's ``filterByAffinity``: (aligned, unaligned, no-affinity) device ids.

    Aligned devices touch the affinity mask, unaligned ones do not, no-affinity ones have no
    topology. Within each list, ids are ordered by NUMA node then id (the kubelet sorts by
    node, putting the affinity's nodes first, for a deterministic, packed allocation).
    """
    by_id = {d.id: d for d in devices}
    ids = sorted(i for i in available if i in by_id)
    if affinity is None or not any(by_id[i].numa for i in ids):
        return [], [], ids
    aligned: list[str] = []
    unaligned: list[str] = []
    none: list[str] = []
    for i in sorted(ids, key=lambda i: (min(by_id[i].numa or {1 << 30}), i)):
        m = by_id[i].mask
        if not m:
            none.append(i)
        elif m & affinity:
            aligned.append(i)
        else:
            unaligned.append(i)
    return aligned, unaligned, none


def devices_to_allocate(devices: Iterable[Device], available: Iterable[str], request: int,
                        affinity: int | None) -> list[str]:
    """Pick ``request`` device ids the way ``devicesToAllocate`` does without a plugin preference:
    aligned ones first, then unaligned, then those without topology."""
    aligned, unaligned, none = filter_by_affinity(devices, available, affinity)
    picked = (aligned + unaligned + none)[:request]
    if len(picked) < request:
        raise ValueError(f"requested {request} devices, only {len(picked)} available")
    return picked


class DeviceHintProvider:
    """Hints for the devices one container holds, grouped by resource name.

    The runtime has already given the container its devices, so (like the kubelet after a
    restart) hints are regenerated from the allocated devices: every mask touching all of
    them, preferred when minimal. ``host_devices`` may add the resource's other devices so
    "minimal" is judged against the whole resource, as the kubelet does.
    """

    name = "devices"

    def __init__(self, numa_nodes: Sequence[int], held: Mapping[str, Sequence[Device]],
                 host_devices: Mapping[str, Sequence[Device]] | None = None) -> None:
        self.numa_nodes = tuple(numa_nodes)
        self.held = held
        self.host_devices = host_devices or {}

    def hints(self, request: object) -> ResourceHints | None:
        out: dict[str, Sequence[TopologyHint] | None] = {}
        for resource, devices in sorted(self.held.items()):
            if not devices:
                continue
            known = {d.id: d for d in self.host_devices.get(resource, ())}
            known.update({d.id: d for d in devices})
            out[resource] = resource_hints(self.numa_nodes, ResourceDevices(
                tuple(known.values()), allocated_here=frozenset(d.id for d in devices)), len(devices))
        return out or None
