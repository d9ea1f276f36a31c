"""Plugin restarts at the core: the checkpoint body the last run wrote (`prior`) and the runtime's
Synchronize rebuild the state; unknown containers or a changed reserved set are repaired, never a
refusal to start (core/connection.py, core/rebuild.py). (Were the rule tests of
tests/service/test_service_restart.py, through the whole stack; a corrupt checkpoint file, a chunked
Synchronize and a reconnect stay there.)"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

import structlog.testing
from core_harness import Edge, container, cpus_of, create, make_core, make_settings, mems_for, pod, updates_of

from nri_pinner.config import Settings
from nri_pinner.core import events as ev
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CpusetUpdate

GOLD, BURST = pod("gold"), pod("burst", "burstable")
ONLINE = CPUSet.parse("0-11")


def first_run(settings: Settings | None = None) -> tuple[Edge, CPUSet, CPUSet]:
    """Run 1: a guaranteed (2 CPUs) and a burstable container; returns (the core, exclusive, shared)."""
    e = make_core(settings)
    e.handle(create(BURST, container(BURST, "app", 100)))
    exclusive = cpus_of(e.handle(create(GOLD, container(GOLD, "app", 2000, 2000))).reply)
    return e, exclusive, e.topology.online - exclusive


def as_running(exclusive: CPUSet, shared: CPUSet, extra: Sequence[api.Container] = ()) -> list[api.Container]:
    """What the runtime lists in Synchronize: the containers with the cpusets they run with."""
    topo = discover(make_settings().sysfs_root)
    return [container(GOLD, "app", 2000, 2000, cpus=str(exclusive), mems=mems_for(topo, exclusive)),
            container(BURST, "app", 100, cpus=str(shared), mems=mems_for(topo, shared)), *extra]


def restarted(before: Edge, settings: Settings | None = None) -> Edge:
    """The next run's core: given what the last one checkpointed, configured, not synchronized yet.
    The runtime's containers have no cgroups here (no runc ran them): every write fails, and the
    Synchronize reply carries what its pass could not write."""
    e = make_core(settings, prior=before.body(), synchronized=False)
    e.no_cgroups = True
    return e


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if str(e["event"]).startswith(name)]


def test_exclusive_cpus_survive_a_restart() -> None:
    before, exclusive, shared = first_run()
    with structlog.testing.capture_logs() as logs:
        e = restarted(before)
        assert e.sync([GOLD, BURST], as_running(exclusive, shared)).updates == ()  # everyone runs where it should
    rows = e.assignments()
    assert rows["gold-app"]["exclusive"] and rows["gold-app"]["cpus"] == str(exclusive)
    assert rows["burst-app"]["cpus"] == str(shared)
    # a new guaranteed container cannot get the restored CPUs
    assert cpus_of(e.handle(create(GOLD, container(GOLD, "next", 2000, 2000))).reply).isdisjoint(exclusive)
    assert not events(logs, "state repaired")  # restored from the checkpoint, not adopted


def test_synchronize_with_containers_the_checkpoint_never_saw() -> None:
    before, exclusive, shared = first_run()
    topo = before.topology
    # started while the plugin was down: one already on 2 free CPUs of one core (adopted), one on
    # every CPU (re-admitted; its cpuset overlaps everything)
    free_core = next(cpus for core, cpus in sorted(topo.core_cpus.items())
                     if cpus.isdisjoint(exclusive) and 0 not in cpus)
    adopted = container(GOLD, "adopted", 2000, 2000, cpus=str(free_core), mems=mems_for(topo, free_core))
    unpinned = container(GOLD, "unpinned", 2000, 2000, cpus=str(topo.online))
    with structlog.testing.capture_logs() as logs:
        e = restarted(before)
        reply = e.sync([GOLD, BURST], as_running(exclusive, shared, [adopted, unpinned]))
    rows = e.assignments()
    assert rows[adopted.id]["cpus"] == str(free_core) and rows[adopted.id]["exclusive"]
    readmitted = CPUSet.parse(rows[unpinned.id]["cpus"])
    assert rows[unpinned.id]["exclusive"] and len(readmitted) == 2
    assert readmitted.isdisjoint(exclusive | free_core) and 0 not in readmitted
    now_shared = topo.online - exclusive - free_core - readmitted
    assert {cid: (u.cpus, u.mems) for cid, u in updates_of(reply).items()} == {
        unpinned.id: (str(readmitted), mems_for(topo, readmitted)),
        "burst-app": (str(now_shared), mems_for(topo, now_shared)),
    }
    assert set(e.entries()) == {"gold-app", "burst-app", adopted.id, unpinned.id}
    repairs = " | ".join(str(x["repair"]) for x in events(logs, "state repaired"))
    assert "adopted exclusive CPUs" in repairs and "re-admitted on exclusive CPUs" in repairs


def test_reserved_cpu_taken_from_a_checkpointed_container_is_repaired() -> None:
    before, exclusive, shared = first_run()
    taken = exclusive.min()
    e = restarted(before, make_settings(cpu_manager={"reserved_cpus": f"0,{taken}"}))
    updates = updates_of(e.sync([GOLD, BURST], as_running(exclusive, shared)))
    row = e.assignments()["gold-app"]
    moved = CPUSet.parse(row["cpus"])
    assert row["exclusive"] and len(moved) == 2 and taken not in moved and 0 not in moved
    assert (updates["gold-app"].cpus, updates["gold-app"].mems) == (str(moved), mems_for(e.topology, moved))
    assert CPUSet.parse(updates["burst-app"].cpus) == e.topology.online - moved
    assert e.entries()["gold-app"]["current"] == str(moved)


def test_sidecar_stays_a_sidecar_across_a_restart() -> None:
    """A running init container marked as a sidecar keeps that mark (from the checkpoint): when it
    stops, its CPUs stay its pod's (kubelet v1.32: nothing releases at a stop) but are not reusable by
    its pod's next container (updateCPUsToReuse skips restartable init containers); they go back with
    the pod. (Pool changes as NRI updates: cgroup writes off.)"""
    sidecar = container(GOLD, "proxy", 2000, 2000, init=True)
    app = container(GOLD, "app", 2000, 2000)
    burst = container(BURST, "app", 100)
    before = make_core(cgroup_writes=False)
    topo = before.topology
    before.handle(create(BURST, burst))
    side_cpus = cpus_of(before.handle(create(GOLD, sidecar)).reply)
    app_cpus = cpus_of(before.handle(create(GOLD, app)).reply)
    assert before.entries()[sidecar.id]["restartable"]

    shared = topo.online - side_cpus - app_cpus
    listed = [container(GOLD, "proxy", 2000, 2000, init=True, cpus=str(side_cpus), mems=mems_for(topo, side_cpus)),
              container(GOLD, "app", 2000, 2000, cpus=str(app_cpus), mems=mems_for(topo, app_cpus)),
              container(BURST, "app", 100, cpus=str(shared), mems=mems_for(topo, shared))]
    e = make_core(cgroup_writes=False, prior=before.body(), synchronized=False)
    assert e.sync([GOLD, BURST], listed).updates == ()
    assert e.entries()[sidecar.id]["restartable"]
    stopped = e.handle(ev.StopContainer(sidecar.id)).reply
    assert updates_of(stopped) == {}
    assert not e.core.node.state.reusable.get(GOLD.uid)  # a sidecar's CPUs are never reused
    e.handle(ev.StopPodSandbox(GOLD))
    reply = e.handle(create(BURST, container(BURST, "late", 100))).reply
    assert updates_of(reply) == {burst.id: CpusetUpdate(burst.id, str(ONLINE), mems_for(topo, ONLINE), True)}
