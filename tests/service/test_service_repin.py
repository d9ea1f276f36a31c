"""Guaranteed containers Synchronize had to leave on the shared pool are pinned as soon as CPUs free up,
oldest first, before a newer container can take the CPUs (issue 20, defect 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from svc_harness import assignments, container, cpuset_updates, create, make_settings, mems_for, pod, running

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_1_9, RuntimeProfile

BIG, FILLER, WAIT = pod("big"), pod("filler"), pod("wait")
PROFILES = [pytest.param(CONTAINERD_1_7_24, id="1.7"), pytest.param(CONTAINERD_2_1_9, id="2.1")]


def node(topo_online: CPUSet) -> tuple[list[api.Container], api.Container, api.Container, api.Container]:
    """12 CPUs, CPU 0 reserved: big holds 2,8, filler 8 more, CPU 6 is free; two 2-CPU containers wait.
    The younger one sorts first by id; created_at (NRI v0.10+) says which is older."""
    big = container(BIG, "app", 2000, 2000, cpus="2,8")
    filler = container(FILLER, "app", 8000, 8000, cpus="1,3-5,7,9-11")
    young = container(WAIT, "a-young", 2000, 2000, cpus=str(topo_online))
    old = container(WAIT, "z-old", 2000, 2000, cpus=str(topo_online))
    young.created_at, old.created_at = 2_000, 1_000
    return [big, filler, young, old], big, young, old


@pytest.mark.parametrize("profile", PROFILES)
async def test_waiting_guaranteed_container_is_pinned_oldest_first_when_cpus_free_up(
        workdir: Path, profile: RuntimeProfile) -> None:
    settings = make_settings(workdir, reconcile={"cgroup_writes": False})  # the runtime path: updates in replies
    online = CPUSet.parse("0-11")
    ctrs, big, young, old = node(online)
    async with running(settings, profile, pods=[BIG, FILLER, WAIT], containers=ctrs) as r:
        rows = assignments(r.svc)
        assert not rows[young.id]["exclusive"] and not rows[old.id]["exclusive"]  # both wait
        # kubelet v1.32: an exited container's CPUs stay its pod's until the pod goes (plugin.py doc)
        stopped = await r.conn.stop_container(api.StopContainerRequest(pod=BIG, container=big))
        assert stopped is not None and not assignments(r.svc)[old.id]["exclusive"]
        await r.conn.state_change(api.STOP_POD_SANDBOX, BIG)
        rows = assignments(r.svc)
        pinned = CPUSet.parse(rows[old.id]["cpus"])
        assert rows[old.id]["exclusive"] and len(pinned) == 2 and pinned.issubset(CPUSet.parse("2,6,8"))
        assert not rows[young.id]["exclusive"]  # one CPU left: the younger one keeps waiting
        assert CPUSet.parse(rows[young.id]["cpus"]) == CPUSet.parse("0,2,6,8") - pinned  # the pool left
        # a newer Guaranteed container cannot jump the queue for the CPU left
        reply = await r.conn.create_container(create(WAIT, container(WAIT, "newer", 1000, 1000)))
        assert reply is not None
        assert CPUSet.parse(reply.adjust.linux.resources.cpu.cpus).isdisjoint(pinned)
        updates = cpuset_updates(reply.update)
        assert updates[old.id] == (str(pinned), mems_for(r.topology, pinned))  # delivered in the next reply
        assert all(u.ignore_failure for u in reply.update)  # neighbour updates (defect 7)


async def test_waiting_container_is_pinned_when_a_pod_is_removed(workdir: Path) -> None:
    settings = make_settings(workdir, reconcile={"cgroup_writes": False})  # the runtime path: updates in replies
    ctrs, _big, young, old = node(CPUSet.parse("0-11"))
    async with running(settings, CONTAINERD_2_1_9, pods=[BIG, FILLER, WAIT], containers=ctrs) as r:
        await r.conn.state_change(api.REMOVE_POD_SANDBOX, BIG)
        rows = assignments(r.svc)
        assert rows[old.id]["exclusive"] and not rows[young.id]["exclusive"]
        # the next reply carries the new cpusets (as for any drift the runtime has not applied)
        reply = await r.conn.create_container(create(WAIT, container(WAIT, "shared", 100)))
        assert reply is not None
        assert old.id in cpuset_updates(reply.update)
