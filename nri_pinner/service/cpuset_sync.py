"""Bring every tracked container to its desired cpuset: cgroup write first, NRI update as fallback.

Called with the tracker lock held, inside an event handler, before the reply: when the reply
leaves, every shared container already runs off the CPUs this event made exclusive (no window).
A container whose cgroup cannot be written (not started yet, gone, a refused write) gets the
NRI `ContainerUpdate` in the reply instead — the runtime applies it before it goes on — so a
failed write is never an unpinned container, only the old, slower path for that container.
"""

from __future__ import annotations

import structlog

from ..engine.cpuset import CPUSet
from ..nri.gen import api_pb2 as api
from .cgroup_writer import CpusetWriter
from .cgroups import CgroupError
from .tracker import Tracker

log = structlog.get_logger("nri_pinner.service")


def cpu_update(container_id: str, cpus: CPUSet | str, mems: str) -> api.ContainerUpdate:
    u = api.ContainerUpdate(container_id=container_id)
    u.linux.resources.cpu.cpus = str(cpus)
    u.linux.resources.cpu.mems = mems
    return u


def sync_cpusets(tracker: Tracker, writer: CpusetWriter | None, exclude: str = "") -> list[api.ContainerUpdate]:
    """Containers whose applied cpuset differs from the desired one: written, or listed for the reply."""
    updates = []
    texts: dict[CPUSet, str] = {}  # shared containers all get the same pool: format it once
    for t in tracker.containers.values():
        if t.stopped or t.container_id == exclude:
            continue
        cpus, mems = tracker.desired(t)
        if t.applied_cpus == cpus and t.applied_mems == mems:
            continue
        if writer is not None and t.cgroups_path:
            try:
                writer.apply(t.cgroups_path, cpus, mems)
                t.applied_cpus, t.applied_mems = cpus, mems
                continue
            except CgroupError as exc:
                log.debug("cgroup write failed; the NRI update carries it", container=t.key[1], error=str(exc))
        text = texts.get(cpus) or texts.setdefault(cpus, str(cpus))
        updates.append(cpu_update(t.container_id, text, mems))
        t.applied_cpus, t.applied_mems = cpus, mems
    return updates
