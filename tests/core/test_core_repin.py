"""Guaranteed containers Synchronize had to leave on the shared pool are pinned as soon as CPUs free up,
oldest first, before a newer container can take the CPUs (issue 20, defect 3; core/rebuild.py
repin_waiting). (Was tests/service/test_service_repin.py, through the whole stack.) Cgroup writes
off: the new cpusets travel in replies."""

from __future__ import annotations

from core_harness import Edge, container, cpus_of, create, make_core, mems_for, pod, updates_of

from nri_pinner.core import events as ev
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CpusetUpdate, UpdatesReply

BIG, FILLER, WAIT = pod("big"), pod("filler"), pod("wait")


def node() -> tuple[Edge, api.Container, api.Container, api.Container]:
    """12 CPUs, CPU 0 reserved: big holds 2,8, filler 8 more, CPU 6 is free; two 2-CPU containers wait.
    The younger one sorts first by id; created_at (NRI v0.10+) says which is older."""
    online = CPUSet.parse("0-11")
    big = container(BIG, "app", 2000, 2000, cpus="2,8")
    filler = container(FILLER, "app", 8000, 8000, cpus="1,3-5,7,9-11")
    young = container(WAIT, "a-young", 2000, 2000, cpus=str(online))
    old = container(WAIT, "z-old", 2000, 2000, cpus=str(online))
    young.created_at, old.created_at = 2_000, 1_000
    e = make_core(cgroup_writes=False, synchronized=False)  # the runtime path: updates in replies
    e.sync([BIG, FILLER, WAIT], [big, filler, young, old])
    return e, big, young, old


def test_waiting_guaranteed_container_is_pinned_oldest_first_when_cpus_free_up() -> None:
    e, big, young, old = node()
    rows = e.assignments()
    assert not rows[young.id]["exclusive"] and not rows[old.id]["exclusive"]  # both wait
    # kubelet v1.32: an exited container's CPUs stay its pod's until the pod goes (core/roles.py)
    stopped = e.handle(ev.StopContainer(big.id)).reply
    assert isinstance(stopped, UpdatesReply) and not e.assignments()[old.id]["exclusive"]
    e.handle(ev.StopPodSandbox(BIG))
    rows = e.assignments()
    pinned = CPUSet.parse(rows[old.id]["cpus"])
    assert rows[old.id]["exclusive"] and len(pinned) == 2 and pinned.issubset(CPUSet.parse("2,6,8"))
    assert not rows[young.id]["exclusive"]  # one CPU left: the younger one keeps waiting
    assert CPUSet.parse(rows[young.id]["cpus"]) == CPUSet.parse("0,2,6,8") - pinned  # the pool left
    # a newer Guaranteed container cannot jump the queue for the CPU left
    reply = e.handle(create(WAIT, container(WAIT, "newer", 1000, 1000))).reply
    assert cpus_of(reply).isdisjoint(pinned)
    updates = updates_of(reply)
    # delivered in the next reply, as a neighbour update whose failure is ignored (defect 7)
    assert updates[old.id] == CpusetUpdate(old.id, str(pinned), mems_for(e.topology, pinned), True)
    assert all(u.ignore_failure for u in updates.values())


def test_waiting_container_is_pinned_when_a_pod_is_removed() -> None:
    e, _big, young, old = node()
    e.handle(ev.RemovePodSandbox(BIG))
    rows = e.assignments()
    assert rows[old.id]["exclusive"] and not rows[young.id]["exclusive"]
    # the next reply carries the new cpusets (as for any drift the runtime has not applied)
    reply = e.handle(create(WAIT, container(WAIT, "shared", 100))).reply
    assert old.id in updates_of(reply)
