"""The runtime's own record of each container's cpuset, brought in line once the pool is quiet
(core/runtime_record_updates.py): which containers, when, one at a time, never beside a cgroup pass, and a
start that waits for a pass waits for a record update in flight too (runc writes the cgroup with the
set our reply named, possibly a change behind)."""

from __future__ import annotations

from core_harness import Edge, container, create, make_core, make_settings, of_type, passes, pod

from nri_pinner.core import events as ev
from nri_pinner.core.effects import Park, UpdateRuntimeRecords
from nri_pinner.core.node import Outcome
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CreateReply, UpdatesReply

BPOD, GPOD, HPOD = pod("burst", "burstable"), pod("gold"), pod("gold2")
B = container(BPOD, "app", 500, 1000)
G, H = container(GPOD, "app", 2000, 2000), container(HPOD, "app", 2000, 2000)
QUIET = 1.0


def settle_passes(e: Edge) -> None:
    """Answer passes and fire settle timers, never the records timer (the tests fire it)."""
    for _ in range(50):
        if e.in_flight:
            e.write()
            continue
        due = [n for n in e.armed if not n.startswith(("wait:", "records"))]
        if not due:
            return
        e.fire(due[0])
    raise AssertionError("never settles")


def run(e: Edge, sandbox: api.PodSandbox, c: api.Container) -> CPUSet:
    reply = e.handle(create(sandbox, c)).reply
    assert isinstance(reply, CreateReply)
    e.cgroups[c.id] = CPUSet.parse(reply.cpus)
    e.handle(ev.StartContainer(c.id))
    settle_passes(e)
    return CPUSet.parse(reply.cpus)


def record_updates(out: Outcome) -> list[UpdateRuntimeRecords]:
    return of_type(out.effects, UpdateRuntimeRecords)


def cpuset_update(sandbox: api.PodSandbox, c: api.Container, cpus: CPUSet) -> ev.UpdateContainer:
    """A cpuset-only CRI update as containerd relays it (our record update coming back)."""
    req = api.UpdateContainerRequest(pod=sandbox, container=c)
    req.linux_resources.cpu.cpus = str(cpus)
    return ev.UpdateContainer(req)


def narrowed() -> tuple[Edge, CPUSet]:
    """A shared container B whose record still holds every CPU after G took two: the pool is quiet."""
    e = make_core()
    assert e.handle(ev.RuntimeRecordUpdatesReady()).effects  # the quiet timer
    run(e, BPOD, B)
    run(e, GPOD, G)
    assert e.core.node.recorded[B.id][0] != e.pool  # the create-time set: every CPU but the reserved one
    out = e.fire("records")  # armed before the changes above: not quiet yet, looked at again
    assert record_updates(out) == [] and e.armed.get("records") == QUIET
    return e, e.pool


def test_a_shared_containers_record_follows_the_pool_once_it_is_quiet() -> None:
    e, pool = narrowed()
    out = e.fire("records")
    [sync] = record_updates(out)
    [item] = sync.items
    assert (item.container_id, item.cpus) == (B.id, pool)
    assert passes(out) == []
    # the runtime asks us (CRI UpdateContainerResources -> NRI UpdateContainer): the reply names the pool
    reply = e.handle(cpuset_update(BPOD, B, pool)).reply
    assert isinstance(reply, UpdatesReply) and reply.updates[0].cpus == str(pool)
    out = e.handle(ev.RuntimeRecordsUpdated(sync.sync_id, [ev.RecordResult(B.id, "cri")]))
    assert e.core.records.stale() == 0
    assert "records" not in e.armed and passes(out) == []  # nothing more to do, nothing to write
    assert e.core.node.recorded[G.id][0] == e.cgroups[G.id]  # an exclusive record was right all along


def test_a_start_waits_for_a_record_update_in_flight_and_the_pass_after_it() -> None:
    e, pool = narrowed()
    [sync] = record_updates(e.fire("records"))
    # B's update reaches us before H's create: the reply names the pool as it is now
    e.handle(cpuset_update(BPOD, B, pool))
    reply = e.handle(create(HPOD, H)).reply
    assert isinstance(reply, CreateReply)
    h_cpus = CPUSet.parse(reply.cpus)
    assert h_cpus.issubset(pool)
    e.cgroups[H.id] = h_cpus
    started = e.handle(ev.StartContainer(H.id))
    assert isinstance(started.reply, Park) and passes(started) == []  # no pass beside runc's write of B's old set
    settle_passes(e)
    assert not e.in_flight and started.reply.token not in e.resolves
    # runc has written B's cgroup with the old pool; the record update is over: the pass goes, urgent
    out = e.handle(ev.RuntimeRecordsUpdated(sync.sync_id, [ev.RecordResult(B.id, "cri")]))
    [p] = passes(out)
    assert p.urgent and {i.container_id: i.cpus for i in p.items}[B.id] == pool - h_cpus
    e.write()
    assert started.reply.token in e.resolves  # H starts only now
    assert e.cgroups[B.id] == pool - h_cpus


def test_a_failed_record_update_rewrites_the_cgroup_and_waits_for_the_next_change() -> None:
    e, pool = narrowed()
    [sync] = record_updates(e.fire("records"))
    out = e.handle(ev.RuntimeRecordsUpdated(sync.sync_id, [ev.RecordResult(B.id, "", "DeadlineExceeded")]))
    assert B.id not in e.core.node.told
    [p] = passes(out)  # runc may still write the old set late: the cgroup is written again
    assert [(i.container_id, i.cpus) for i in p.items] == [(B.id, pool)]
    e.write()
    assert "records" not in e.armed  # not retried at this state before the retry delay
    assert e.armed.get("records-retry") == 10.0
    run(e, BPOD, container(BPOD, "side", 100))  # a change: B's record is tried again once it is quiet
    [again] = record_updates(e.fire("records"))
    assert [i.container_id for i in again.items] == [B.id]


def test_a_failed_record_update_on_a_quiet_node_is_retried_after_a_growing_delay() -> None:
    """Found in the VM tier: a CRI update under emulation outlasted the pass wait, and the node stayed
    quiet — the record would have stayed stale until some unrelated change."""
    e, pool = narrowed()
    delays = []
    for _ in range(3):
        [sync] = record_updates(e.fire("records"))
        out = e.handle(ev.RuntimeRecordsUpdated(sync.sync_id, [ev.RecordResult(B.id, "", "DeadlineExceeded")]))
        assert passes(out)
        e.write()
        assert "records" not in e.armed
        delays.append(e.armed["records-retry"])
        e.fire("records-retry")  # the delay is over, no change happened
        assert e.armed.get("records") == QUIET  # the pool must still be quiet first
    assert delays == [10.0, 30.0, 60.0]
    [sync] = record_updates(e.fire("records"))
    e.handle(cpuset_update(BPOD, B, pool))
    e.handle(ev.RuntimeRecordsUpdated(sync.sync_id, [ev.RecordResult(B.id, "cri")]))
    assert e.core.records.stale() == 0 and "records-retry" not in e.armed
    assert e.core.records.failures_in_a_row == 0  # the next failure waits 10 s again


def test_records_are_left_alone_when_off_or_without_cgroup_writes() -> None:
    off = make_core(make_settings(reconcile={"period_seconds": 0, "cri_socket": "", "cgroup_root": "/nonexistent",
                                             "runtime_record_quiet_seconds": 0}))
    nowrites = make_core(cgroup_writes=False)
    for e in (off, nowrites):
        assert e.handle(ev.RuntimeRecordUpdatesReady()).effects == []
        run(e, BPOD, B)
        run(e, GPOD, G)
        assert "records" not in e.armed


def test_synchronize_takes_the_runtimes_record_and_brings_a_stale_one_in_line() -> None:
    e = make_core(synchronized=False)
    e.handle(ev.RuntimeRecordUpdatesReady())
    running = [api.Container(id=c.id, pod_sandbox_id=c.pod_sandbox_id, name=c.name, state=api.CONTAINER_RUNNING,
                             labels=c.labels, annotations=c.annotations, linux=c.linux) for c in (B, G)]
    everything = str(e.topology.online)
    for c in running:
        c.linux.resources.cpu.cpus = everything  # the create-time set the runtime stored
    g_cpus = CPUSet.parse("1-2")
    pool = e.topology.online - g_cpus
    cgroups = {B.linux.cgroups_path: (pool, ()), G.linux.cgroups_path: (g_cpus, ())}
    e.handle(ev.Synchronize([BPOD, GPOD], running, cgroups))
    settle_passes(e)  # (Edge.sync would fire the records timer too)
    assert e.core.node.recorded[B.id][0] == e.topology.online
    assert record_updates(e.fire("records")) == []  # armed before the Synchronize: not quiet yet
    [sync] = record_updates(e.fire("records"))
    [item] = sync.items
    assert (item.container_id, item.cpus) == (B.id, e.pool)
