"""The NRI updates a reply must carry; started containers are left to the cgroup passes.

Decided by the core for each reply. Containers that have not started yet (no cgroup), and started
ones whose cgroup write failed, get the NRI update in the reply — the runtime applies it before it
goes on — so a failed write is never an unpinned container, only the old, slower path for that
container. Without cgroup writes (`cgroup_writes = false`) every change travels this way.
"""

from __future__ import annotations

from ..engine.cpumanager.state import EngineState
from ..engine.cpuset import CPUSet
from ..nri.handlers import CpusetUpdate
from .state import ContainerRecord, Mems, NodeState, View, desired_of, mems_text

UNLIMITED = -1  # a CFS quota of -1: runc writes cpu.cfs_quota_us -1 (v1) / cpu.max "max <period>" (v2)


def cpu_update(container_id: str, cpus: CPUSet, mems: Mems, quota: int | None = None) -> CpusetUpdate:
    return CpusetUpdate(container_id, str(cpus), mems_text(mems), cpu_quota=quota)


def update_quota(enabled: bool, state: EngineState, t: ContainerRecord) -> int | None:
    """The CPU quota an update (or the create's adjustment) of `t` carries: none while it holds exclusive
    CPUs and has a quota (`cpu_manager.disable_cpu_quota_with_exclusive_cpus`, core/quotas.py); the
    kubelet's back once it does not (`quota_back`); None leaves the kubelet's. A pure rule of the state:
    the over-budget fallback reads a published view."""
    if not enabled or not t.cfs_quota:
        return None
    a = state.get(*t.key)
    return UNLIMITED if a is not None and a.exclusive else quota_back(state, t)


def quota_back(state: EngineState, t: ContainerRecord) -> int | None:
    """The kubelet's quota of a container that lost its exclusive CPUs with no kubelet resize to send
    one (pod_level.demote: the kubelet never pinned it): our -1 is what the runtime holds. None for
    every other container (a resize to shared carries the kubelet's quota, which a reply leaves)."""
    if not t.quota_removed or t.cfs_quota <= 0:
        return None
    a = state.get(*t.key)
    return None if a is not None and a.exclusive else t.cfs_quota


def view_update(view: View, t: ContainerRecord, quota_off: bool) -> CpusetUpdate:
    """`t`'s update from a published view (the over-budget fallback, on the wire loop: no lock)."""
    engine = view.engine
    cpus, mems = desired_of(engine, view.state, view.shared_pool, t.key, engine.mems_of)
    return cpu_update(t.container_id, cpus, mems, update_quota(quota_off, view.state, t))


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
        updates.append(CpusetUpdate(cid, *text, cpu_quota=quota_back(node.state, t), ignore_failure=True))
        told[cid] = node.recorded[cid] = desired
    return updates
