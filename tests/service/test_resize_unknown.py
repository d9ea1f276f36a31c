"""Updates of containers the plugin does not know (README "Resize": containers Synchronize did not
list), through the real stub and the fake runtime, on a cgroup-v1 tree built in tmp.

containerd 1.7 never synchronizes a pre-installed plugin (modelled by the fake runtime's
``synchronize=False``), and a runtime whose CRI plugin has not loaded every container yet leaves
some out of Synchronize. containerd still relays their kubelet updates, and runc applies
containerd's stored spec -- with the create-time cpuset -- unless the reply carries ours. The
plugin adopts such a container by the rebuild rules, or at least answers with the shared pool."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from svc_harness import assignments, checkpoint_entries, container, cpuset_updates, make_settings, pod, running
from test_cgroup_pool import held, written
from test_resize_service import BPOD, GPOD, count, resize, started

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub_wire import TtrpcStatusError
from nri_pinner.service.core.rebuild import rebuild
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_1_9

B = container(BPOD, "app", 100)
G = container(GPOD, "app", 2000, 2000)


async def first_run(workdir: Path, grow: bool = False) -> tuple[CPUSet, CPUSet, CPUSet]:
    """B (created first, on every CPU) and G (exclusive) running; G grown to 4 CPUs if asked.
    Returns (online, G's baseline, G's current set); the checkpoint and cgroups hold them."""
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings) as r:
        online = r.topology.online
        await started(r, root, BPOD, B)
        baseline = current = await started(r, root, GPOD, G)
        if grow:
            reply = await r.conn.update_container(resize(G, GPOD, 4000))
            assert reply is not None
            current = CPUSet.parse(cpuset_updates(reply.update)[G.id][0])
        await written(r.svc)
        assert held(root, B)[0] == online - current
    return online, baseline, current


async def test_an_unlisted_shared_container_is_adopted_on_the_shared_pool(workdir: Path) -> None:
    online, _, mine = await first_run(workdir)
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    # containerd restarted and its CRI plugin had not loaded the burstable pod: Synchronize lists G only
    g = container(GPOD, "app", 2000, 2000, cpus=str(mine))
    async with running(settings, pods=[GPOD], containers=[g]) as r:
        assert B.id not in assignments(r.svc)
        stale = container(BPOD, "app", 100, cpus=str(online))  # containerd's record: the create's cpuset
        reply = await r.conn.update_container(resize(stale, BPOD, 200, 0))
        assert reply is not None
        assert cpuset_updates(reply.update)[B.id][0] == str(online - mine)  # not nothing, not its stale set
        doc = assignments(r.svc)[B.id]
        assert doc["exclusive"] is False and doc["resize"]["outcome"] == "shared"
        assert count(r.svc, "shared") == 1
        assert held(root, B)[0] == online - mine


async def test_an_unlisted_exclusive_container_keeps_its_checkpointed_sets(workdir: Path) -> None:
    _, baseline, grown = await first_run(workdir, grow=True)
    settings = make_settings(workdir)
    # Synchronize lists nothing (the checkpoint's entries are dropped there); G's update comes later
    async with running(settings) as r:
        assert not r.svc.plugin.node.state.exclusive_cpus()
        g = container(GPOD, "app", 4000, 4000, cpus=str(baseline))
        reply = await r.conn.update_container(resize(g, GPOD, 6000))
        assert reply is not None
        cpus = CPUSet.parse(cpuset_updates(reply.update)[G.id][0])
        assert len(cpus) == 6 and grown.issubset(cpus)  # the grow kept what it ran on
        doc = assignments(r.svc)[G.id]
        assert (doc["admitted"], doc["resize"]["outcome"]) == (str(baseline), "grow")
        with pytest.raises(TtrpcStatusError, match="ResizeBelowBaseline"):
            await r.conn.update_container(resize(g, GPOD, 1000))
    assert checkpoint_entries(settings)[G.id]["admitted"] == str(baseline)  # flushed at close


async def test_seeded_checkpoint_restores_both_sets_and_a_resize_right_after_it(workdir: Path) -> None:
    """The pre-Synchronize seeding (containerd 1.7, pre-installed: no Synchronize at all)."""
    online, baseline, grown = await first_run(workdir, grow=True)
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    async with running(settings, CONTAINERD_1_7_24, synchronize=False) as r:
        tr = r.svc.plugin.node
        seeded = tr.state.get(GPOD.uid, "app")
        assert seeded is not None and seeded.exclusive
        assert (seeded.admitted, seeded.current) == (baseline, grown)
        assert not tr.containers and tr.shared_pool == online - grown
        # a new Guaranteed container never gets the held CPUs
        other = pod("other")
        assert (await started(r, root, other, container(other, "app", 2000, 2000))).isdisjoint(grown)
        # the kubelet resizes G right away: adopted with both sets, then grown from its current one
        g = container(GPOD, "app", 4000, 4000, cpus=str(baseline))
        reply = await r.conn.update_container(resize(g, GPOD, 5000))
        assert reply is not None
        cpus = CPUSet.parse(cpuset_updates(reply.update)[G.id][0])
        assert len(cpus) == 5 and grown.issubset(cpus)
        assert G.id not in r.svc.plugin.core.seeded
        a = tr.state.get(GPOD.uid, "app")
        assert a is not None and (a.admitted, a.current) == (baseline, cpus)
        # the shared container nobody listed: the shared pool, never its create-time set
        stale = container(BPOD, "app", 100, cpus=str(online))
        reply = await r.conn.update_container(resize(stale, BPOD, 100, 0))
        assert reply is not None
        assert cpuset_updates(reply.update)[B.id][0] == str(tr.shared_pool)
        assert not CPUSet.parse(str(tr.shared_pool)) & tr.state.exclusive_cpus()


async def test_an_update_that_cannot_be_adopted_gets_the_shared_pool(workdir: Path) -> None:
    settings = make_settings(workdir)
    async with running(settings) as r:
        mine = await started(r, Path(settings.reconcile.cgroup_root), GPOD, G)
        stray = container(BPOD, "app", 100, cpus=str(r.topology.online))
        req = resize(stray, BPOD, 200, 0)
        req.pod.CopyFrom(api.PodSandbox())  # no pod to place it in
        reply = await r.conn.update_container(req)
        assert reply is not None
        assert cpuset_updates(reply.update)[B.id][0] == str(r.topology.online - mine)
        assert B.id not in assignments(r.svc)
        stray.state = api.CONTAINER_STOPPED  # a stopped one needs no cpuset
        reply = await r.conn.update_container(resize(stray, BPOD, 200, 0))
        assert reply is not None and B.id not in cpuset_updates(reply.update)


async def test_an_unknown_instance_of_a_known_name_is_not_adopted(workdir: Path) -> None:
    """Its name's engine record belongs to the tracked instance: answered with the shared pool, and
    the tracked instance keeps its CPUs."""
    settings = make_settings(workdir)
    async with running(settings) as r:
        mine = await started(r, Path(settings.reconcile.cgroup_root), GPOD, G)
        twin = container(GPOD, "app", 2000, 2000, cid="gold-app-old", cpus=str(mine))
        reply = await r.conn.update_container(resize(twin, GPOD, 2000))
        assert reply is not None
        assert cpuset_updates(reply.update)[twin.id][0] == str(r.topology.online - mine)
        assert twin.id not in assignments(r.svc) and assignments(r.svc)[G.id]["cpus"] == str(mine)


async def test_an_unknown_container_over_budget_gets_the_shared_pool_and_is_adopted_late(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings(workdir, nri={"budget_margin_ms": 400})
    async with running(settings, CONTAINERD_2_1_9, request_timeout=1.0) as r:  # budget 0.6 s
        mine = await started(r, Path(settings.reconcile.cgroup_root), GPOD, G)
        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(1.0)  # a blocked adoption: past the budget, inside the runtime's timeout
            return rebuild(*args, **kwargs)

        monkeypatch.setattr("nri_pinner.service.core.resizing.rebuild", slow)
        stale = container(BPOD, "app", 100, cpus=str(r.topology.online))
        reply = await r.conn.update_container(resize(stale, BPOD, 200, 0))
        assert reply is not None and not r.conn.closed
        assert cpuset_updates(reply.update)[B.id][0] == str(r.topology.online - mine)
        async with asyncio.timeout(5):
            while B.id not in assignments(r.svc):
                await asyncio.sleep(0.01)
