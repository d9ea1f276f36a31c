"""Container lifecycle rules at the core: admission, release, init reuse, rejections. (Were the rule
tests of tests/service/test_service_lifecycle.py, through the whole stack; the assertions on the
reply the runtime decoded are on the core's reply here, those on the status document and the
checkpoint file on the document and checkpoint body of the core's published view.)"""

from __future__ import annotations

from typing import Any

import pytest
from core_harness import DUAL_SOCKET, container, cpus_of, create, make_core, make_settings, mems_for, pod, updates_of

from nri_pinner.core import events as ev
from nri_pinner.core.effects import Refusal
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.handlers import CpusetUpdate, CreateReply, UpdatesReply


def test_guaranteed_gets_exclusive_cpus_and_shared_containers_shrink_in_the_same_reply() -> None:
    e = make_core()
    all_cpus = e.topology.online
    bpod, epod, gpod = pod("burst", "burstable"), pod("best", "besteffort"), pod("gold")
    b, x = container(bpod, "app", 500, 1000), container(epod, "app")
    g = container(gpod, "app", 2000, 2000)

    for sb, c in ((bpod, b), (epod, x)):
        reply = e.handle(create(sb, c)).reply
        assert cpus_of(reply) == all_cpus  # the whole shared pool
        assert isinstance(reply, CreateReply) and reply.mems == mems_for(e.topology, all_cpus)

    reply = e.handle(create(gpod, g)).reply
    exclusive = cpus_of(reply)
    assert len(exclusive) == 2 and 0 not in exclusive  # CPU 0 is reserved
    assert isinstance(reply, CreateReply) and reply.mems == mems_for(e.topology, exclusive)
    shared = all_cpus - exclusive
    # every shared container (created, no cgroup yet) shrinks in this very reply, before g can start
    assert updates_of(reply) == {
        b.id: CpusetUpdate(b.id, str(shared), mems_for(e.topology, shared), True),
        x.id: CpusetUpdate(x.id, str(shared), mems_for(e.topology, shared), True),
    }

    doc = e.document()
    assert doc["pools"]["shared"] == str(shared)
    assert doc["pools"]["exclusive"] == str(exclusive)
    rows = e.assignments()
    assert rows[g.id]["exclusive"] and rows[g.id]["cpus"] == str(exclusive) and rows[g.id]["qos"] == "guaranteed"
    assert (rows[b.id]["qos"], rows[x.id]["qos"]) == ("burstable", "besteffort")
    assert not rows[b.id]["exclusive"] and rows[b.id]["cpus"] == str(shared)
    entries = e.entries()
    assert entries[g.id]["exclusive"] and entries[g.id]["current"] == str(exclusive)
    assert not entries[b.id]["exclusive"]

    # a second guaranteed container never overlaps the first
    g2 = container(gpod, "side", 1000, 1000)
    reply = e.handle(create(gpod, g2)).reply
    second = cpus_of(reply)
    assert len(second) == 1 and second.isdisjoint(exclusive)
    assert set(updates_of(reply)) == {b.id, x.id}


def test_stop_keeps_the_cpus_for_the_pod_and_remove_releases_them_on_the_next_reply() -> None:
    """A stop no longer releases: the kubelet (v1.32 PostStopContainer, reconcileState) keeps an
    exited container's CPUs for a possible restart until its pod goes. (The whole-stack test of the
    same name keeps both ways RemoveContainer arrives: StateChange (v0.6.1) or its own RPC (v0.12).)"""
    e = make_core()
    all_cpus = e.topology.online
    bpod, gpod, hpod = pod("burst", "burstable"), pod("gold"), pod("hot")
    b = container(bpod, "app", 100)
    g, h = container(gpod, "app", 2000, 2000), container(hpod, "app", 4000, 4000)
    for sb, c in ((bpod, b), (gpod, g), (hpod, h)):
        assert isinstance(e.handle(create(sb, c)).reply, CreateReply)
    held_by_h = CPUSet.parse(e.assignments()[h.id]["cpus"])
    held_by_g = CPUSet.parse(e.assignments()[g.id]["cpus"])

    stopped = e.handle(ev.StopContainer(g.id)).reply
    assert stopped == UpdatesReply()  # g's CPUs stay with its pod
    assert e.assignments()[g.id]["stopped"]
    assert e.document()["pools"]["shared"] == str(all_cpus - held_by_h - held_by_g)
    assert e.entries()[g.id]["stopped"]

    e.handle(ev.RemoveContainer(g.id))  # its last instance: released
    assert g.id not in e.assignments()
    assert g.id not in e.entries()

    # h goes away without a StopContainer (RemoveContainer only): its CPUs are released, and as a
    # state event has no reply, the growth travels on the next reply the runtime gets
    assert e.handle(ev.RemoveContainer(h.id)).reply is None
    assert e.document()["pools"]["shared"] == str(all_cpus)
    assert h.id not in e.entries()
    reply = e.handle(create(bpod, container(bpod, "late", 100))).reply
    assert cpus_of(reply) == all_cpus
    assert updates_of(reply) == {b.id: CpusetUpdate(b.id, str(all_cpus), mems_for(e.topology, all_cpus), True)}

    # pod removal drops whatever the pod still had
    e.handle(ev.RemovePodSandbox(bpod))
    assert e.assignments() == {}


def test_init_container_cpus_are_reused_by_the_app_container() -> None:
    e = make_core()
    bpod, gpod = pod("burst", "burstable"), pod("gold")
    b = container(bpod, "app", 100)
    init, app = container(gpod, "setup", 2000, 2000, init=True), container(gpod, "app", 2000, 2000)
    e.handle(create(bpod, b))
    init_cpus = cpus_of(e.handle(create(gpod, init)).reply)
    assert len(init_cpus) == 2 and e.assignments()[init.id]["init"]

    stopped = e.handle(ev.StopContainer(init.id)).reply
    assert stopped == UpdatesReply()  # the exited init container's CPUs stay with the pod
    assert e.document()["pools"]["shared"] == str(e.topology.online - init_cpus)

    reply = e.handle(create(gpod, app)).reply
    assert cpus_of(reply) == init_cpus
    assert updates_of(reply) == {}  # nothing moved: the shared pool did not change

    # removing the exited init container must not free CPUs its app container now holds
    e.handle(ev.RemoveContainer(init.id))
    doc = e.document()
    assert doc["pools"]["exclusive"] == str(init_cpus)
    assert doc["pools"]["shared"] == str(e.topology.online - init_cpus)
    assert e.entries()[app.id]["current"] == str(init_cpus)


def test_init_container_still_running_is_a_sidecar_and_its_cpus_are_not_reused() -> None:
    e = make_core()
    gpod = pod("gold")
    sidecar, app = container(gpod, "proxy", 2000, 2000, init=True), container(gpod, "app", 2000, 2000)
    sidecar_cpus = cpus_of(e.handle(create(gpod, sidecar)).reply)
    app_cpus = cpus_of(e.handle(create(gpod, app)).reply)  # the init container never stopped
    assert len(app_cpus) == 2 and app_cpus.isdisjoint(sidecar_cpus)
    assert e.document()["pools"]["exclusive"] == str(sidecar_cpus | app_cpus)
    assert e.entries()[sidecar.id]["restartable"]


REJECTIONS = [
    # 8 CPUs cannot fit one NUMA node of 6 CPUs
    pytest.param({"topology_manager": {"policy": "single-numa-node"}}, 8000, "TopologyAffinityError",
                 id="single-numa-node"),
    # 3 CPUs is not a whole number of 2-thread cores
    pytest.param({"cpu_manager": {"policy_options": ["full-pcpus-only"]}}, 3000, "SMTAlignmentError",
                 id="full-pcpus-only"),
]


@pytest.mark.parametrize(("options", "milli", "reason"), REJECTIONS)
def test_rejection_fails_the_create_with_the_reason(options: dict[str, dict[str, Any]], milli: int,
                                                     reason: str) -> None:
    e = make_core(make_settings(DUAL_SOCKET, **options))
    gpod = pod("big")
    refusal = e.handle(create(gpod, container(gpod, "app", milli, milli))).reply
    assert isinstance(refusal, Refusal) and refusal.kind == "admission"  # the stub fails the create with it
    assert reason in refusal.message
    assert e.document()["pools"]["exclusive"] == ""
    assert e.metric("nri_pinner_pinning_errors_total", {"reason": reason}) == 1
    assert e.metric("nri_pinner_fail_open_total", {"cause": "rejected"}) == 0
    assert [d["outcome"] for d in e.document()["decisions"]] == ["rejected"]


@pytest.mark.parametrize(("options", "milli", "reason"), REJECTIONS)
def test_rejection_with_on_reject_shared_starts_on_the_shared_pool(options: dict[str, dict[str, Any]], milli: int,
                                                                   reason: str) -> None:
    e = make_core(make_settings(DUAL_SOCKET, **options, nri={"on_reject": "shared"}))
    online = e.topology.online
    gpod = pod("big")
    big = container(gpod, "app", milli, milli)
    assert cpus_of(e.handle(create(gpod, big)).reply) == online
    row = e.assignments()[big.id]
    assert not row["exclusive"] and row["cpus"] == str(online)
    assert e.metric("nri_pinner_fail_open_total", {"cause": "rejected"}) == 1
    assert e.metric("nri_pinner_pinning_errors_total", {"reason": reason}) == 1
    # a guaranteed container that fits is still pinned afterwards
    ok = container(gpod, "small", 2000, 2000)
    reply = e.handle(create(gpod, ok)).reply
    pinned = cpus_of(reply)
    assert len(pinned) == 2
    assert updates_of(reply) == {
        big.id: CpusetUpdate(big.id, str(online - pinned), mems_for(e.topology, online - pinned), True)}
