"""Container lifecycle through the real stub and the fake runtime: admission, release, init reuse,
rejections. Every assertion is on the reply bytes the runtime decoded, the status document or
the checkpoint file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from svc_harness import (
    assignments,
    checkpoint_entries,
    container,
    cpuset_updates,
    create,
    document,
    make_settings,
    mems_for,
    pod,
    running,
)

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub_wire import TtrpcStatusError
from nri_pinner.service.app import Service
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_3_0, RuntimeProfile


def metric(svc: Service, name: str, labels: dict[str, str] | None = None) -> float:
    value = svc.metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else float(value)


async def test_guaranteed_gets_exclusive_cpus_and_shared_containers_shrink_in_the_same_reply(
        workdir: Path) -> None:
    settings = make_settings(workdir)
    async with running(settings) as r:
        all_cpus = r.topology.online
        bpod, epod, gpod = pod("burst", "burstable"), pod("best", "besteffort"), pod("gold")
        b, e = container(bpod, "app", 500, 1000), container(epod, "app")
        g = container(gpod, "app", 2000, 2000)

        for sb, c in ((bpod, b), (epod, e)):
            reply = await r.conn.create_container(create(sb, c))
            assert reply is not None
            assert CPUSet.parse(reply.adjust.linux.resources.cpu.cpus) == all_cpus  # the whole shared pool
            assert reply.adjust.linux.resources.cpu.mems == mems_for(r.topology, all_cpus)

        reply = await r.conn.create_container(create(gpod, g))
        assert reply is not None
        exclusive = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(exclusive) == 2 and 0 not in exclusive  # CPU 0 is reserved
        assert reply.adjust.linux.resources.cpu.mems == mems_for(r.topology, exclusive)
        shared = all_cpus - exclusive
        # every running shared container shrinks in this very reply, before g can start
        assert cpuset_updates(reply.update) == {
            b.id: (str(shared), mems_for(r.topology, shared)),
            e.id: (str(shared), mems_for(r.topology, shared)),
        }

        doc = document(r.svc)
        assert doc["pools"]["shared"] == str(shared)
        assert doc["pools"]["exclusive"] == str(exclusive)
        rows = assignments(r.svc)
        assert rows[g.id]["exclusive"] and rows[g.id]["cpus"] == str(exclusive) and rows[g.id]["qos"] == "guaranteed"
        assert (rows[b.id]["qos"], rows[e.id]["qos"]) == ("burstable", "besteffort")
        assert not rows[b.id]["exclusive"] and rows[b.id]["cpus"] == str(shared)
        entries = checkpoint_entries(settings)
        assert entries[g.id]["exclusive"] and entries[g.id]["current"] == str(exclusive)
        assert not entries[b.id]["exclusive"]

        # a second guaranteed container never overlaps the first
        g2 = container(gpod, "side", 1000, 1000)
        reply = await r.conn.create_container(create(gpod, g2))
        assert reply is not None
        second = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(second) == 1 and second.isdisjoint(exclusive)
        assert set(cpuset_updates(reply.update)) == {b.id, e.id}


@pytest.mark.parametrize("profile", [CONTAINERD_1_7_24, CONTAINERD_2_3_0], ids=lambda p: p.label)
async def test_stop_keeps_the_cpus_for_the_pod_and_remove_releases_them_on_the_next_reply(
        workdir: Path, profile: RuntimeProfile) -> None:
    """RemoveContainer arrives as StateChange (v0.6.1) or as its own RPC (v0.12). A stop no longer
    releases: the kubelet (v1.32 PostStopContainer, reconcileState) keeps an exited container's CPUs
    for a possible restart until its pod goes."""
    settings = make_settings(workdir)
    async with running(settings, profile) as r:
        all_cpus = r.topology.online
        bpod, gpod, hpod = pod("burst", "burstable"), pod("gold"), pod("hot")
        b = container(bpod, "app", 100)
        g, h = container(gpod, "app", 2000, 2000), container(hpod, "app", 4000, 4000)
        for sb, c in ((bpod, b), (gpod, g), (hpod, h)):
            assert await r.conn.create_container(create(sb, c)) is not None
        held_by_h = CPUSet.parse(assignments(r.svc)[h.id]["cpus"])

        held_by_g = CPUSet.parse(assignments(r.svc)[g.id]["cpus"])
        stopped = await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=g))
        assert stopped is not None
        assert stopped.update == []  # g's CPUs stay with its pod
        assert assignments(r.svc)[g.id]["stopped"]
        assert document(r.svc)["pools"]["shared"] == str(all_cpus - held_by_h - held_by_g)
        assert checkpoint_entries(settings)[g.id]["stopped"]

        assert await r.conn.state_change(api.REMOVE_CONTAINER, gpod, g)  # its last instance: released
        assert g.id not in assignments(r.svc)
        assert g.id not in checkpoint_entries(settings)

        # h goes away without a StopContainer (RemoveContainer only): its CPUs are released, and
        # as a state event has no reply, the growth travels on the next reply the runtime gets
        assert await r.conn.state_change(api.REMOVE_CONTAINER, hpod, h)
        assert document(r.svc)["pools"]["shared"] == str(all_cpus)
        assert h.id not in checkpoint_entries(settings)
        late = container(bpod, "late", 100)
        reply = await r.conn.create_container(create(bpod, late))
        assert reply is not None
        assert reply.adjust.linux.resources.cpu.cpus == str(all_cpus)
        assert cpuset_updates(reply.update) == {b.id: (str(all_cpus), mems_for(r.topology, all_cpus))}

        # pod removal drops whatever the pod still had
        assert await r.conn.state_change(api.REMOVE_POD_SANDBOX, bpod)
        assert assignments(r.svc) == {}


async def test_init_container_cpus_are_reused_by_the_app_container(workdir: Path) -> None:
    settings = make_settings(workdir)
    async with running(settings) as r:
        bpod, gpod = pod("burst", "burstable"), pod("gold")
        b = container(bpod, "app", 100)
        init, app = container(gpod, "setup", 2000, 2000, init=True), container(gpod, "app", 2000, 2000)
        await r.conn.create_container(create(bpod, b))
        reply = await r.conn.create_container(create(gpod, init))
        assert reply is not None
        init_cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(init_cpus) == 2 and assignments(r.svc)[init.id]["init"]

        stopped = await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=init))
        assert stopped is not None
        assert stopped.update == []  # the exited init container's CPUs stay with the pod
        assert document(r.svc)["pools"]["shared"] == str(r.topology.online - init_cpus)

        reply = await r.conn.create_container(create(gpod, app))
        assert reply is not None
        assert CPUSet.parse(reply.adjust.linux.resources.cpu.cpus) == init_cpus
        assert reply.update == []  # nothing moved: the shared pool did not change

        # removing the exited init container must not free CPUs its app container now holds
        assert await r.conn.state_change(api.REMOVE_CONTAINER, gpod, init)
        doc = document(r.svc)
        assert doc["pools"]["exclusive"] == str(init_cpus)
        assert doc["pools"]["shared"] == str(r.topology.online - init_cpus)
        assert checkpoint_entries(settings)[app.id]["current"] == str(init_cpus)


async def test_init_container_still_running_is_a_sidecar_and_its_cpus_are_not_reused(workdir: Path) -> None:
    settings = make_settings(workdir)
    async with running(settings) as r:
        gpod = pod("gold")
        sidecar, app = container(gpod, "proxy", 2000, 2000, init=True), container(gpod, "app", 2000, 2000)
        reply = await r.conn.create_container(create(gpod, sidecar))
        assert reply is not None
        sidecar_cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        reply = await r.conn.create_container(create(gpod, app))  # the init container never stopped
        assert reply is not None
        app_cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(app_cpus) == 2 and app_cpus.isdisjoint(sidecar_cpus)
        doc = document(r.svc)
        assert doc["pools"]["exclusive"] == str(sidecar_cpus | app_cpus)
        assert checkpoint_entries(settings)[sidecar.id]["restartable"]


REJECTIONS = [
    # 8 CPUs cannot fit one NUMA node of 6 CPUs
    pytest.param({"topology_manager": {"policy": "single-numa-node"}}, 8000, "TopologyAffinityError",
                 id="single-numa-node"),
    # 3 CPUs is not a whole number of 2-thread cores
    pytest.param({"cpu_manager": {"policy_options": ["full-pcpus-only"]}}, 3000, "SMTAlignmentError",
                 id="full-pcpus-only"),
]


@pytest.mark.parametrize(("options", "milli", "reason"), REJECTIONS)
async def test_rejection_fails_the_create_with_the_reason(
        workdir: Path, options: dict[str, dict[str, Any]], milli: int, reason: str) -> None:
    settings = make_settings(workdir, options=options)
    async with running(settings) as r:
        gpod = pod("big")
        big = container(gpod, "app", milli, milli)
        with pytest.raises(TtrpcStatusError) as failed:
            await r.conn.create_container(create(gpod, big))
        assert reason in failed.value.status_message
        assert not r.conn.closed  # an error status, not a dropped plugin
        assert document(r.svc)["pools"]["exclusive"] == ""
        assert metric(r.svc, "nri_pinner_pinning_errors_total", {"reason": reason}) == 1
        assert metric(r.svc, "nri_pinner_fail_open_total", {"cause": "rejected"}) == 0
        assert [d["outcome"] for d in document(r.svc)["decisions"]] == ["rejected"]


@pytest.mark.parametrize(("options", "milli", "reason"), REJECTIONS)
async def test_rejection_with_on_reject_shared_starts_on_the_shared_pool(
        workdir: Path, options: dict[str, dict[str, Any]], milli: int, reason: str) -> None:
    settings = make_settings(workdir, options=options, nri={"on_reject": "shared"})
    async with running(settings) as r:
        gpod = pod("big")
        big = container(gpod, "app", milli, milli)
        reply = await r.conn.create_container(create(gpod, big))
        assert reply is not None
        assert CPUSet.parse(reply.adjust.linux.resources.cpu.cpus) == r.topology.online
        row = assignments(r.svc)[big.id]
        assert not row["exclusive"] and row["cpus"] == str(r.topology.online)
        assert metric(r.svc, "nri_pinner_fail_open_total", {"cause": "rejected"}) == 1
        assert metric(r.svc, "nri_pinner_pinning_errors_total", {"reason": reason}) == 1
        # a guaranteed container that fits is still pinned afterwards
        ok = container(gpod, "small", 2000, 2000)
        reply = await r.conn.create_container(create(gpod, ok))
        assert reply is not None
        pinned = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(pinned) == 2
        assert cpuset_updates(reply.update) == {
            big.id: (str(r.topology.online - pinned), mems_for(r.topology, r.topology.online - pinned))}
