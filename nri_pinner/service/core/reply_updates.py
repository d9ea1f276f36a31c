"""The NRI updates a reply must carry; started containers are left to the cgroup passes.

Decided by the core for each reply. Containers that have not started yet (no cgroup), and started
ones whose cgroup write failed, get the NRI update in the reply — the runtime applies it before it
goes on — so a failed write is never an unpinned container, only the old, slower path for that
container. Without cgroup writes (`cgroup_writes = false`) every change travels this way.
"""

from __future__ import annotations

from ...engine.cpuset import CPUSet
from ...nri.handlers import CpusetUpdate
from .records import Mems, NodeState, mems_text


def cpu_update(container_id: str, cpus: CPUSet, mems: Mems) -> CpusetUpdate:
    return CpusetUpdate(container_id, str(cpus), mems_text(mems))


def reply_updates(node: NodeState, cgroup_writes: bool, exclude: str = "") -> list[CpusetUpdate]:
    """Containers whose told cpuset differs from the desired one and that only a reply can reach."""
    updates = []
    texts: dict[tuple[CPUSet, Mems], tuple[str, str]] = {}  # shared containers all get the same pool: format once
    told, via_reply = node.told, node.via_reply
    for t in node.containers.values():
        cid = t.container_id
        if t.stopped or cid == exclude or (cgroup_writes and t.started and cid not in via_reply):
            continue
        desired = node.desired(t)
        if told.get(cid) == desired:
            continue
        via_reply.discard(cid)
        text = texts.get(desired) or texts.setdefault(desired, (str(desired[0]), mems_text(desired[1])))
        # riding on another container's reply: containerd logs a failed one and goes on; say so
        updates.append(CpusetUpdate(cid, *text, ignore_failure=True))
        told[cid] = node.recorded[cid] = desired
    return updates
