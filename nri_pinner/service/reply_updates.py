"""The NRI updates a reply must carry; started containers are left to the cgroup syncer.

Called with the tracker lock held, inside an event handler. Containers that have not started
yet (no cgroup), and started ones whose cgroup write failed, get the NRI `ContainerUpdate` in the
reply — the runtime applies it before it goes on — so a failed write is never an unpinned
container, only the old, slower path for that container. Without a syncer (`cgroup_writes =
false`) every change travels this way.
"""

from __future__ import annotations

from ..engine.cpuset import CPUSet
from ..nri.gen import api_pb2 as api
from .tracker import Tracker


def cpu_update(container_id: str, cpus: CPUSet | str, mems: str) -> api.ContainerUpdate:
    u = api.ContainerUpdate(container_id=container_id)
    u.linux.resources.cpu.cpus = str(cpus)
    u.linux.resources.cpu.mems = mems
    return u


def neighbour_update(container_id: str, cpus: CPUSet | str, mems: str) -> api.ContainerUpdate:
    """An update riding on another container's reply: containerd logs a failed one and goes on; say so."""
    u = cpu_update(container_id, cpus, mems)
    u.ignore_failure = True
    return u


def reply_updates(tracker: Tracker, cgroup_writes: bool, exclude: str = "") -> list[api.ContainerUpdate]:
    """Containers whose applied cpuset differs from the desired one and that only a reply can reach."""
    updates = []
    texts: dict[CPUSet, str] = {}  # shared containers all get the same pool: format it once
    for t in tracker.containers.values():
        if t.stopped or t.container_id == exclude or (cgroup_writes and t.started and not t.fallback):
            continue
        cpus, mems = tracker.desired(t)
        if t.applied_cpus == cpus and t.applied_mems == mems:
            continue
        t.fallback = False
        text = texts.get(cpus) or texts.setdefault(cpus, str(cpus))
        updates.append(neighbour_update(t.container_id, text, mems))
        t.applied_cpus, t.applied_mems = cpus, mems
    return updates
