"""Device hints from the kubelet's PodResources API (``List`` + ``GetAllocatableResources``): pure translation.

The kubelet has allocated a pod's device-plugin devices before its sandbox runs, and ``List``
reports them per container with the NUMA nodes the device plugin gave (``TopologyInfo``). The
hints follow the same rule as the sysfs provider (``hints.py``; the kubelet re-deriving hints for
devices a container already holds): every mask holding all of a resource's devices, preferred when
minimal, "minimal" judged against every allocatable device of the resource; a resource none of
whose devices has a topology has no preference.

Both providers may see one device (PodResources by its plugin's id, sysfs by its device node), and
the ids rarely match, so resources are matched by name. For a container PodResources reports
devices for, a sysfs device is dropped when PodResources reports its resource (exactly, e.g. the CDI
class ``nvidia.com/gpu``; the SR-IOV ``PCIDEVICE_`` spelling ``intel_com_sriov`` of
``intel.com/sriov``; or, for a resource named after its driver, one of that vendor: ``nvidia`` for
``nvidia.com/gpu``) or the same device id. PodResources wins for what it reports because it knows
the allocation; everything else sysfs finds (devices no device plugin hands out) keeps its sysfs hint.

Pod scope: an NRI create carries one container, so pod-level device hints (the union of the
devices of all the pod's containers) exist only here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..topologymanager.hints import HintRequest, ResourceHints
from .hints import Device, DeviceHintProvider

NAME = "podresources"

DeviceEntry = tuple[str, Sequence[str], Sequence[int] | None]
"""One ``ContainerDevices``: resource name, device ids, NUMA node ids (None = no ``topology``)."""


def devices_by_resource(entries: Iterable[DeviceEntry]) -> dict[str, tuple[Device, ...]]:
    """``{resource: devices}`` from ``ContainerDevices`` entries (one id listed twice counts once).

    A ``topology`` with no nodes, or only negative ids, is no topology (the kubelet's "no NUMA").
    """
    out: dict[str, dict[str, Device]] = {}
    for resource, ids, numa in entries:
        nodes = frozenset(n for n in numa or () if n >= 0) or None
        devices = out.setdefault(resource, {})
        for i in ids:
            devices.setdefault(i, Device(i, nodes))
    return {r: tuple(d.values()) for r, d in out.items() if d}


@dataclass(frozen=True)
class PodResourcesView:
    """One immutable snapshot: ``(namespace, pod) -> container -> {resource: devices}`` and allocatable."""

    pods: Mapping[tuple[str, str], Mapping[str, Mapping[str, tuple[Device, ...]]]] = field(default_factory=dict)
    allocatable: Mapping[str, tuple[Device, ...]] = field(default_factory=dict)

    def container(self, namespace: str, pod: str, container: str) -> Mapping[str, tuple[Device, ...]] | None:
        """The container's devices; None when the pod or container is not in the snapshot."""
        containers = self.pods.get((namespace, pod))
        return None if containers is None else containers.get(container)

    def pod(self, namespace: str, pod: str) -> dict[str, tuple[Device, ...]] | None:
        """Pod scope: every device of the pod's containers per resource; None when the pod is unknown."""
        containers = self.pods.get((namespace, pod))
        if containers is None:
            return None
        out: dict[str, dict[str, Device]] = {}
        for devices in containers.values():
            for resource, held in devices.items():
                out.setdefault(resource, {}).update({d.id: d for d in held})
        return {r: tuple(d.values()) for r, d in out.items()}


def _spelled(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "_", name.lower())


def without_reported(sysfs: Mapping[str, Sequence[Device]],
                     reported: Mapping[str, Sequence[Device]]) -> dict[str, list[Device]]:
    """The sysfs devices PodResources does not already report for this container (see module doc)."""
    if not reported:
        return {r: list(d) for r, d in sysfs.items()}
    ids = {d.id for held in reported.values() for d in held}
    names = set(reported) | {_spelled(r) for r in reported}
    vendors = {r.split("/", 1)[0].split(".", 1)[0].lower() for r in reported if "/" in r}
    out: dict[str, list[Device]] = {}
    for resource, devices in sysfs.items():
        if resource in names or _spelled(resource) in names or resource.lower() in vendors:
            continue
        kept = [d for d in devices if d.id not in ids]
        if kept:
            out[resource] = kept
    return out


class PodDevicesSource(Protocol):
    """Where the provider reads the latest snapshot (the service's fetcher; a table in tests)."""

    def held(self, pod_key: str, container: str | None) -> Mapping[str, Sequence[Device]] | None:
        """The devices PodResources reports for the container (None: the whole pod, pod scope)."""
        ...

    def allocatable(self) -> Mapping[str, Sequence[Device]]:
        """Every device the kubelet can allocate, per resource (``GetAllocatableResources``)."""
        ...


class PodResourcesHintProvider:
    """Device hints for what the kubelet allocated to a container (or, pod scope, to the whole pod)."""

    name = NAME

    def __init__(self, numa_nodes: Sequence[int], source: PodDevicesSource) -> None:
        self.numa_nodes = tuple(numa_nodes)
        self.source = source

    def hints(self, request: HintRequest) -> ResourceHints | None:
        held = self.source.held(request.pod_uid, request.container)
        if not held:
            return None
        return DeviceHintProvider(self.numa_nodes, held, self.source.allocatable()).hints(request)


class PodResourcesTable:
    """A fixed snapshot keyed by pod key (tests, ``simulate``-style callers): the two sources in one."""

    def __init__(self, view: PodResourcesView, pods: Mapping[str, tuple[str, str]]) -> None:
        self.view, self.pods = view, dict(pods)

    def held(self, pod_key: str, container: str | None) -> Mapping[str, Sequence[Device]] | None:
        where = self.pods.get(pod_key)
        if where is None:
            return None
        return self.view.pod(*where) if container is None else self.view.container(*where, container)

    def allocatable(self) -> Mapping[str, Sequence[Device]]:
        return self.view.allocatable
