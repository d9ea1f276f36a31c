"""A runtime connection at the core (core/connection.py): Synchronize rebuilds from the runtime's
containers, trusting what their cgroups hold, and answers once a pass has written the started ones;
the end of a connection forgets what was told; a reply the runtime never saw is undone."""

from __future__ import annotations

from core_harness import (
    container,
    create,
    make_core,
    make_settings,
    mems_for,
    park_token,
    passes,
    pod,
    resolved,
    updates_of,
)

from nri_pinner.core import events as ev
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CpusetUpdate, CreateReply, UpdatesReply

BPOD, GPOD, XPOD = pod("burst", "burstable"), pod("gold"), pod("extra", "besteffort")
B = container(BPOD, "app", 500, 1000, cpus="0-11", mems="0,1")
G = container(GPOD, "app", 2000, 2000, cpus="2,8", mems="0")  # containerd's record: the create's set
X = container(XPOD, "app", cpus="0-11", mems="0,1", state=api.CONTAINER_CREATED)
HELD = CPUSet.parse("3,9")  # what G's cgroup really holds (pool changes and repairs are written there)


def synchronize() -> ev.Synchronize:
    cgroups = {B.linux.cgroups_path: (CPUSet.parse("0-11"), (0, 1)), G.linux.cgroups_path: (HELD, (1,))}
    return ev.Synchronize([BPOD, GPOD, XPOD], [B, G, X], cgroups)


def test_synchronize_rebuilds_from_the_cgroups_and_answers_after_the_pass() -> None:
    e = make_core(synchronized=False)
    online = e.topology.online

    out = e.handle(synchronize())
    token = park_token(out.reply)
    node = e.core.node
    assert set(node.containers) == {B.id, G.id, X.id}
    assert node.desired(node.containers[G.id]) == (HELD, (1,))  # the cgroup wins over the runtime's record
    pool = online - HELD
    assert e.pool == pool
    [p] = passes(out)
    assert p.urgent
    # B's cgroup holds every CPU: narrowed; G's already holds its set; X has no cgroup yet
    assert [(i.container_id, i.cpus) for i in p.items] == [(B.id, pool)]

    out = e.write()
    reply = resolved(out)[token]
    assert isinstance(reply, UpdatesReply)
    assert updates_of(reply) == {X.id: CpusetUpdate(X.id, str(pool), mems_for(e.topology, pool), True)}


def test_synchronize_reply_carries_a_started_container_whose_write_failed() -> None:
    e = make_core(synchronized=False)
    token = park_token(e.handle(synchronize()).reply)
    out = e.write(errors={B.id: "ENOENT"})
    reply = resolved(out)[token]
    pool = e.pool
    assert set(updates_of(reply)) == {B.id, X.id}
    assert updates_of(reply)[B.id] == CpusetUpdate(B.id, str(pool), mems_for(e.topology, pool), True)


def test_synchronize_with_nothing_to_write_is_answered_at_once() -> None:
    e = make_core(synchronized=False)
    b = container(BPOD, "app", 500, 1000)
    out = e.handle(ev.Synchronize([BPOD], [b], {b.linux.cgroups_path: (e.topology.online, (0, 1))}))
    assert out.reply == UpdatesReply() and passes(out) == []


def test_connection_closed_drops_parked_replies() -> None:
    e = make_core()
    online = e.topology.online
    b = container(BPOD, "app", 500, 1000)
    e.run(BPOD, b)
    reply = e.handle(create(GPOD, G)).reply
    assert isinstance(reply, CreateReply)
    token = park_token(e.handle(ev.StartContainer(G.id)).reply)

    out = e.handle(ev.ConnectionClosed())
    assert out.reply is None and out.effects == []
    e.write()  # the pass in flight still reports ...
    assert token not in e.resolves  # ... but the start it was for went with the connection
    assert e.cgroups[b.id] == online - CPUSet.parse(reply.cpus)
    e.fire(f"wait:{token}")  # and its wait limit answers nothing either
    assert token not in e.resolves


def test_connection_closed_forgets_what_was_told() -> None:
    e = make_core()
    online = e.topology.online
    b, x = container(BPOD, "app", 500, 1000), container(XPOD, "app")
    e.run(BPOD, b)
    mine = e.run(GPOD, G)
    e.handle(create(XPOD, x))
    e.settle()

    e.handle(ev.ConnectionClosed())
    # the next reply resends what only a reply reaches; the next pass rewrites every started cgroup
    e.history.clear()
    reply = e.handle(create(XPOD, container(XPOD, "two"))).reply
    pool = online - mine
    assert updates_of(reply) == {x.id: CpusetUpdate(x.id, str(pool), mems_for(e.topology, pool), True)}
    e.settle()
    [p] = e.history
    assert {i.container_id: (i.cpus, i.known) for i in p.items} == {b.id: (pool, None), G.id: (mine, None)}


def test_a_discarded_create_reply_undoes_the_exclusive_admission() -> None:
    e = make_core()
    online = e.topology.online
    reply = e.handle(create(GPOD, G)).reply
    assert isinstance(reply, CreateReply) and len(CPUSet.parse(reply.cpus)) == 2

    out = e.handle(ev.ReplyDiscarded("create_container", G.id))
    assert out.reply is None
    node = e.core.node
    t = node.containers[G.id]  # the container stays (the runtime created it from the fallback) ...
    a = node.assignment(t)
    assert a is not None and not a.exclusive  # ... on the shared pool
    assert e.pool == online and node.desired(t)[0] == online
    # what was told is forgotten: the next reply tells it its cpuset again
    reply = e.handle(create(BPOD, container(BPOD, "app", 500, 1000))).reply
    assert updates_of(reply) == {G.id: CpusetUpdate(G.id, str(online), "0,1", True)}


def test_a_discarded_create_reply_with_on_timeout_fail_forgets_the_container() -> None:
    e = make_core(make_settings(nri={"on_timeout": "fail"}))
    e.handle(create(GPOD, G))
    e.handle(ev.ReplyDiscarded("create_container", G.id))
    assert G.id not in e.core.node.containers and e.pool == e.topology.online
