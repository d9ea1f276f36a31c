"""Container lifecycle through the real stub and the fake runtime: the wiring of what the core decides
(tests/core/test_core_admission.py has the rules). Kept here: a stop and both ways a RemoveContainer
arrives (StateChange in NRI v0.6.1, its own RPC in v0.12), and a refusal failing the create with an
error status. Every assertion is on the reply bytes the runtime decoded, the status document or the
checkpoint file."""

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

from nri_pinner.edge.app import Service
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub.wire import TtrpcStatusError
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_3_0, RuntimeProfile


def metric(svc: Service, name: str, labels: dict[str, str] | None = None) -> float:
    value = svc.metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else float(value)


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


REJECTIONS = [
    # 8 CPUs cannot fit one NUMA node of 6 CPUs (every rejection reason: tests/core/test_core_admission.py)
    pytest.param({"topology_manager": {"policy": "single-numa-node"}}, 8000, "TopologyAffinityError",
                 id="single-numa-node"),
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
