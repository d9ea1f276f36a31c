"""The shared pool held on the kubelet's QoS slices (`reconcile.systemd_pool_on_qos_slices`;
docs/systemd-pool-design.md): a pool change is a constant number of systemd calls, whatever the number
of shared containers in Burstable and BestEffort pods.

Host tests: a cgroup-v2 tree the test builds in the systemd driver's layout (plain files: no kernel
behind them) and the stand-in systemd bus (dbus_peer.py). What the kernel and systemd 257 do with the
same writes and calls is argued from their source in the design doc; the VM tier is where they run."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from dbus_peer import DBusPeer
from svc_harness import container, cpuset_updates, create, make_settings, pod, running

from nri_pinner.config import ConfigError, from_mapping
from nri_pinner.core.effects import SliceItem
from nri_pinner.core.qos_slices import qos_slice, slice_path
from nri_pinner.edge.cgroups.cpuset_writer import CpusetWriter
from nri_pinner.edge.cgroups.paths import relative_cgroup_path
from nri_pinner.edge.cgroups.qos_slices import SlicePass, narrowing, qos_slices_apply, widening
from nri_pinner.edge.cgroups.systemd_units import SystemdUnits, cpu_mask
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from testkit.pod_builders import resize_request

BURSTABLE, BESTEFFORT = "kubepods-burstable.slice", "kubepods-besteffort.slice"



# -- the rules, alone ---------------------------------------------------------------------------------

def test_the_qos_slice_comes_from_the_systemd_drivers_path_only() -> None:
    assert qos_slice("kubepods-burstable-pod12_34.slice:cri-containerd:abc") == BURSTABLE
    assert qos_slice("kubepods-besteffort-podx.slice:cri-containerd:abc") == BESTEFFORT
    assert qos_slice("kubepods-pod12_34.slice:cri-containerd:abc") is None  # a Guaranteed pod: per scope
    assert qos_slice("/kubepods/burstable/pod1/abc") is None  # cgroupfs driver: per cgroup
    assert qos_slice("system.slice:docker:abc") is None and qos_slice("") is None
    assert slice_path(BURSTABLE) == "/kubepods.slice/kubepods-burstable.slice"


def test_a_slice_loses_cpus_before_the_pass_and_gains_them_after() -> None:
    def steps(known: str | None, new: str) -> tuple[str | None, str | None]:
        s = SliceItem(BURSTABLE, "/x", CPUSet.parse(new), None if known is None else CPUSet.parse(known), ())
        a, b = narrowing(s), widening(s)
        return (None if a is None else str(a)), (None if b is None else str(b))

    assert steps("0-11", "0-11") == (None, None)
    assert steps(None, "0-9") == ("0-9", None)  # never confirmed: straight to the pool, before the items
    assert steps("0-11", "0-9") == ("0-9", None)  # a Guaranteed create: narrow first
    assert steps("0-9", "0-11") == (None, "0-11")  # its removal: widen last
    assert steps("0-9", "0-8,10") == ("0-8", "0-8,10")  # a CPU moves out and another in: what it keeps first
    assert steps("0-1", "2-3") == ("2-3", None)  # nothing kept: never an empty cpuset


def test_the_setting_needs_cgroup_writes_and_a_systemd_bus() -> None:
    base = {"reconcile": {"systemd_pool_on_qos_slices": True}}
    assert from_mapping(base, "<t>").reconcile.systemd_pool_on_qos_slices
    for off in ({"cgroup_writes": False}, {"systemd_bus": ""}):
        with pytest.raises(ConfigError, match=r"systemd_pool_on_qos_slices: needs reconcile\.cgroup_writes"):
            from_mapping({"reconcile": {**base["reconcile"], **off}}, "<t>")


def test_cgroup_v1_ignores_the_setting_and_v2_finds_the_kubelets_slices(tmp_path: Path) -> None:
    units = SystemdUnits(str(tmp_path / "no-bus"))
    (tmp_path / "v1" / "cpuset").mkdir(parents=True)
    assert qos_slices_apply(True, CpusetWriter(tmp_path / "v1", units=units)) is None
    assert qos_slices_apply(True, None) is None  # cgroup writes off
    v2 = tmp_path / "v2"
    for unit in (BURSTABLE, BESTEFFORT):
        (v2 / slice_path(unit).strip("/")).mkdir(parents=True)
    assert qos_slices_apply(True, CpusetWriter(v2, units=units)) == (BURSTABLE, BESTEFFORT)
    assert qos_slices_apply(False, CpusetWriter(v2, units=units)) is None


# -- the service, cgroup v2 and the systemd driver ------------------------------------------------------

def systemd_driver(c: api.Container, p: api.PodSandbox, qos: str) -> api.Container:
    """The container as containerd reports it under the systemd cgroup driver."""
    uid = p.uid.replace("-", "_")
    pod_slice = f"kubepods-pod{uid}.slice" if qos == "guaranteed" else f"kubepods-{qos}-pod{uid}.slice"
    p.linux.cgroup_parent = pod_slice
    c.linux.cgroups_path = f"{pod_slice}:cri-containerd:{c.id}"
    return c


class Tree:
    """A cgroup-v2 tree in the systemd driver's layout; a container's cgroup holds what runc wrote."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for unit in (BURSTABLE, BESTEFFORT):
            d = self.slice_dir(unit)
            d.mkdir(parents=True)
            (d / "cpuset.cpus").write_text("\n")  # empty: the kubelet's slices inherit every CPU

    def slice_dir(self, unit: str) -> Path:
        return self.root / slice_path(unit).strip("/")

    def held(self, unit_or_container: str | api.Container) -> CPUSet:
        d = (self.slice_dir(unit_or_container) if isinstance(unit_or_container, str)
             else self.dir(unit_or_container))
        return CPUSet.parse((d / "cpuset.cpus").read_text())

    def dir(self, c: api.Container) -> Path:
        return self.root / relative_cgroup_path(c.linux.cgroups_path).strip("/")

    def runc(self, c: api.Container, reply: Any) -> None:
        d = self.dir(c)
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpuset.cpus").write_text(f"{reply.adjust.linux.resources.cpu.cpus}\n")
        (d / "cpuset.mems").write_text(f"{reply.adjust.linux.resources.cpu.mems}\n")


def settings_for(workdir: Path, bus: Path, **reconcile: Any) -> Any:
    return make_settings(workdir, reconcile={"systemd_bus": str(bus), "systemd_pool_on_qos_slices": True, **reconcile},
                         cpu_manager={"disable_cpu_quota_with_exclusive_cpus": False})


def shared_pods(n: int) -> list[tuple[api.PodSandbox, api.Container]]:
    """`n` shared containers, four in five in Burstable pods of ten, the rest in BestEffort ones."""
    out = []
    for i in range(n):
        qos = "besteffort" if i % 5 == 4 else "burstable"
        p = pod(f"{qos[:5]}{i // 10}", qos)
        out.append((p, systemd_driver(container(p, f"c{i}", 100 if qos == "burstable" else 0), p, qos)))
    return out


async def started(r: Any, tree: Tree, p: api.PodSandbox, c: api.Container) -> None:
    """Created (runc applying the reply) and started."""
    tree.runc(c, await r.conn.create_container(create(p, c)))
    await r.conn.state_change(api.START_CONTAINER, p, c)


async def anchor(r: Any, tree: Tree) -> None:
    """A Guaranteed container holding two CPUs from the start."""
    apod = pod("anchor")
    await started(r, tree, apod, systemd_driver(container(apod, "app", 2000, 2000), apod, "guaranteed"))


async def anchor_and_burstable(r: Any, tree: Tree) -> tuple[api.PodSandbox, api.Container]:
    """The anchor, then one Burstable container started below its slice; the pass after it done."""
    await anchor(r, tree)
    bpod = pod("burst", "burstable")
    b = systemd_driver(container(bpod, "app", 100), bpod, "burstable")
    await started(r, tree, bpod, b)
    assert r.svc.plugin.await_pass()
    return bpod, b


@pytest.mark.parametrize("n", [0, 30, 100])
async def test_a_pool_change_costs_the_same_systemd_calls_at_any_number_of_shared_containers(
        workdir: Path, short_dir: Path, n: int) -> None:
    """A Guaranteed create→start and its removal each tell systemd the two QoS slices and the fractional
    container of its own pod, and nothing else: the same count at N = 0, 30 and 100. The start is answered
    only once both slices hold the new pool; the shared containers' own cgroups keep every online CPU."""
    settings = settings_for(workdir, short_dir / "private")
    tree = Tree(Path(settings.reconcile.cgroup_root))
    peer = DBusPeer(short_dir / "private")
    try:
        async with running(settings) as r:
            online = r.topology.online
            await anchor(r, tree)  # exclusive CPUs held already: a shared container's create gets less than all
            created_narrow = set()
            for p, c in shared_pods(n):
                tree.runc(c, await r.conn.create_container(create(p, c)))
                if tree.held(c) != online:  # created before its slice was confirmed: the pool
                    created_narrow.add(f"cri-containerd-{c.id}.scope")
                await r.conn.state_change(api.START_CONTAINER, p, c)
            assert r.svc.plugin.await_pass()
            pool = r.svc.plugin.view().shared_pool
            assert tree.held(BURSTABLE) == tree.held(BESTEFFORT) == pool != online
            for _, c in shared_pods(n):  # each holds every CPU, from runc's create or widened once after
                assert tree.held(c) == online
            widened = [u for _, u, _, _ in peer.calls if u.startswith("cri-containerd-")]
            assert len(widened) == len(set(widened)) and set(widened) == created_narrow
            if n:  # once its slice holds the pool a shared container is created wide: its start costs no call
                assert len(created_narrow) < n

            gpod = pod("gold")
            g = systemd_driver(container(gpod, "app", 2000, 2000), gpod, "guaranteed")
            side = systemd_driver(container(gpod, "side", 500, 500), gpod, "guaranteed")  # fractional: shared
            tree.runc(side, await r.conn.create_container(create(gpod, side)))
            await r.conn.state_change(api.START_CONTAINER, gpod, side)
            assert r.svc.plugin.await_pass()
            before, written = len(peer.calls), r.svc.document()["health"]["cgroup_writes"]["containers"]
            reply = await r.conn.create_container(create(gpod, g))
            assert reply is not None
            tree.runc(g, reply)
            exclusive = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
            await r.conn.state_change(api.START_CONTAINER, gpod, g)
            # answered: both slices and the fractional sidecar already off G's CPUs
            narrowed = pool - exclusive
            assert tree.held(BURSTABLE) == tree.held(BESTEFFORT) == tree.held(side) == narrowed
            assert r.svc.plugin.await_pass()
            create_calls = [u for _, u, _, _ in peer.calls[before:]]
            assert sorted(create_calls) == sorted([BESTEFFORT, BURSTABLE, f"cri-containerd-{side.id}.scope"])
            masks = {u: dict(props)["AllowedCPUs"] for _, u, _, props in peer.calls[before:]}
            assert masks[BURSTABLE] == ("ay", cpu_mask(narrowed))

            before = len(peer.calls)
            await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=g))
            await r.conn.state_change(api.REMOVE_CONTAINER, gpod, g)
            assert r.svc.plugin.await_pass()
            assert tree.held(BURSTABLE) == tree.held(side) == pool
            assert sorted(u for _, u, _, _ in peer.calls[before:]) == sorted(create_calls)
            for _, c in shared_pods(n):  # never written again
                assert tree.held(c) == online
            health = r.svc.document()["health"]["cgroup_writes"]
            assert health["containers"] - written == 2  # the sidecar, narrowed and widened; G's own was runc's
            assert health["unit_failed"] == 0 and health["qos_slice_failed"] == 0
    finally:
        peer.close()


async def test_a_refused_slice_has_the_containers_below_it_written_one_by_one(workdir: Path, short_dir: Path) -> None:
    """systemd refuses the Burstable slice: the pass writes the slice anyway, and every container below it
    gets the pool in its own cgroup, told per scope (the O(N) fallback), before G's start is answered;
    counted (`unit_failed`, the metric) and tried again at the drift check, which widens them again."""
    refuse = {BURSTABLE}
    settings = settings_for(workdir, short_dir / "private", period_seconds=3600)  # drift checks by hand
    tree = Tree(Path(settings.reconcile.cgroup_root))
    peer = DBusPeer(short_dir / "private", lambda unit, props: "org.freedesktop.DBus.Error.AccessDenied"
                    if unit in refuse else None)
    try:
        async with running(settings) as r:
            online = r.topology.online
            await anchor(r, tree)
            shared = shared_pods(10)
            for p, c in shared:
                tree.runc(c, await r.conn.create_container(create(p, c)))
                await r.conn.state_change(api.START_CONTAINER, p, c)
            assert r.svc.plugin.await_pass()
            pool = r.svc.plugin.view().shared_pool
            burstable = [c for _, c in shared if "burstable" in c.linux.cgroups_path]
            assert all(tree.held(c) == pool for c in burstable)  # never widened: the slice is refused
            assert all(tree.held(c) == online for _, c in shared if c not in burstable)
            gpod = pod("gold")
            g = systemd_driver(container(gpod, "app", 2000, 2000), gpod, "guaranteed")
            reply = await r.conn.create_container(create(gpod, g))
            assert reply is not None
            tree.runc(g, reply)
            await r.conn.state_change(api.START_CONTAINER, gpod, g)
            narrowed = pool - CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
            assert tree.held(BURSTABLE) == tree.held(BESTEFFORT) == narrowed  # written directly all the same
            assert all(tree.held(c) == narrowed for c in burstable)  # and each container below it
            health = r.svc.document()["health"]["cgroup_writes"]
            assert health["unit_failed"] >= 2 and health["qos_slice_failed"] == 0
            from prometheus_client import generate_latest
            scraped = generate_latest(r.svc.metrics.registry).decode()
            assert f'nri_pinner_cgroup_writes_total{{kind="unit_failed"}} {float(health["unit_failed"])}' in scraped

            refuse.clear()  # systemd takes it now: the drift check tries the slice again
            assert await r.svc.reconciler.tick() == []
            assert r.svc.plugin.await_pass()
            assert tree.held(BURSTABLE) == narrowed and all(tree.held(c) == online for c in burstable)
    finally:
        peer.close()


async def test_a_malformed_answer_from_the_bus_still_writes_every_cgroup(workdir: Path, short_dir: Path) -> None:
    """Issue 45 item 4: bytes that are no D-Bus message used to escape the pass as an exception (jeepney's
    KeyError): no cgroup was written and no failed call counted. Now every call of the pass is a counted
    failure, the cgroups are written directly, and each scope's set rides on the next reply."""
    verdict: dict[str, str | None] = {"v": None}
    settings = make_settings(workdir, reconcile={"systemd_bus": str(short_dir / "private")},
                             cpu_manager={"disable_cpu_quota_with_exclusive_cpus": False})
    tree = Tree(Path(settings.reconcile.cgroup_root))
    peer = DBusPeer(short_dir / "private", lambda unit, props: verdict["v"])
    try:
        async with running(settings) as r:
            bpod = pod("burst", "burstable")
            b = systemd_driver(container(bpod, "app", 100), bpod, "burstable")
            await started(r, tree, bpod, b)
            verdict["v"] = "garbage"
            gpod = pod("gold")
            g = systemd_driver(container(gpod, "app", 2000, 2000), gpod, "guaranteed")
            reply = await r.conn.create_container(create(gpod, g))
            assert reply is not None
            await r.conn.state_change(api.START_CONTAINER, gpod, g)
            pool = r.svc.plugin.view().shared_pool
            assert tree.held(b) == pool and not pool & CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
            health = r.svc.document()["health"]["cgroup_writes"]
            assert (health["unit_failed"], health["failed"]) == (1, 0)
            verdict["v"] = None
            late = systemd_driver(container(bpod, "late", 100), bpod, "burstable")
            nxt = await r.conn.create_container(create(bpod, late))
            assert nxt is not None and set(cpuset_updates(nxt.update)) == {b.id}  # runc tells systemd
    finally:
        peer.close()


@asynccontextmanager
async def burstable_below_a_held_slice(workdir: Path, short_dir: Path) -> AsyncIterator[
        tuple[Any, Tree, DBusPeer, api.PodSandbox, api.Container]]:
    """The anchor and one started Burstable container holding every CPU below its slice, which holds the
    pool (drift checks by hand): (running, tree, bus peer, its pod, it)."""
    settings = settings_for(workdir, short_dir / "private", period_seconds=3600)
    tree = Tree(Path(settings.reconcile.cgroup_root))
    peer = DBusPeer(short_dir / "private")
    try:
        async with running(settings) as r:
            bpod, b = await anchor_and_burstable(r, tree)
            pool = r.svc.plugin.view().shared_pool
            assert tree.held(b) == r.topology.online and tree.held(BURSTABLE) == pool != r.topology.online
            yield r, tree, peer, bpod, b
    finally:
        peer.close()


async def test_a_kubelet_update_and_a_drifted_slice_are_put_back(workdir: Path, short_dir: Path) -> None:
    """A kubelet resize of a started container below a confirmed slice is answered with the wide set it
    holds (runc writes it and tells systemd), so no pass has to widen it after runc applied the reply (a
    widening pass racing runc's write left the pool in the VM tier's sidecar); a slice someone widened is
    found by the drift check and narrowed again, systemd told first. Neither is a container drift."""
    async with burstable_below_a_held_slice(workdir, short_dir) as (r, tree, peer, bpod, b):
        online, pool = r.topology.online, r.svc.plugin.view().shared_pool
        before = len(peer.calls)
        reply = await r.conn.update_container(resize_request(b, bpod, 200))
        assert reply is not None and cpuset_updates(reply.update)[b.id][0] == str(online)
        assert r.svc.plugin.await_pass()
        assert peer.calls[before:] == []  # no pass has anything to widen
        assert await r.svc.reconciler.tick() == []  # what runc keeps is what the core expects

        before = len(peer.calls)
        (tree.slice_dir(BURSTABLE) / "cpuset.cpus").write_text(f"{online}\n")
        assert await r.svc.reconciler.tick() == []  # no container drifted
        assert r.svc.plugin.await_pass()
        assert tree.held(BURSTABLE) == pool and tree.held(b) == online
        assert [u for _, u, _, _ in peer.calls[before:]] == [BURSTABLE]


async def test_below_a_confirmed_slice_a_create_is_answered_wide_and_its_start_costs_no_call(
        workdir: Path, short_dir: Path) -> None:
    """Once its slice holds the pool, a shared container is created with every online CPU (runc writes
    them and tells systemd; the slice bounds them): its start needs no pass and no systemd call of ours.
    Before, each start was widened by its own SetUnitProperties (a VM-tier run under load saw one go
    unanswered for 5 s during a daemon-reload, and the drift check then repaired the scope)."""
    async with burstable_below_a_held_slice(workdir, short_dir) as (r, tree, peer, bpod, _):
        online = r.topology.online
        before = len(peer.calls)
        b2 = systemd_driver(container(bpod, "second", 100), bpod, "burstable")
        reply = await r.conn.create_container(create(bpod, b2))
        assert reply is not None and reply.adjust.linux.resources.cpu.cpus == str(online)
        tree.runc(b2, reply)
        await r.conn.state_change(api.START_CONTAINER, bpod, b2)
        assert r.svc.plugin.await_pass()
        assert peer.calls[before:] == [] and tree.held(b2) == online
        assert await r.svc.reconciler.tick() == []


async def test_a_slice_read_while_its_pass_is_writing_is_no_drift(workdir: Path, short_dir: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The drift check reads a slice a pass has narrowed before that pass reported back (systemd still
    answering for it): what it read is newer than what the core knows, no drift. Seen in the VM tier
    (issue 45, 2026-11-29): `QoS slice cpuset drift` 0.3-0.8 s after each pool change, the slice then
    unconfirmed until the pass reported, and a container below it read meanwhile "repaired" from the
    whole node (its own set below a held slice) down to the pool."""
    settings = settings_for(workdir, short_dir / "private", period_seconds=3600)  # drift checks by hand
    tree = Tree(Path(settings.reconcile.cgroup_root))
    peer = DBusPeer(short_dir / "private")
    gate = threading.Event()
    real_finish = SlicePass.finish

    def answered_late(self: SlicePass) -> Any:  # every write done; the pass reports once the gate opens
        out = real_finish(self)
        assert gate.wait(10)
        return out

    try:
        async with running(settings) as r:
            online = r.topology.online
            _, b = await anchor_and_burstable(r, tree)
            assert tree.held(b) == online
            for pool_change in ("narrowed", "widened"):
                monkeypatch.setattr(SlicePass, "finish", answered_late)
                gate.clear()
                gpod = pod("gold")
                g = systemd_driver(container(gpod, "app", 2000, 2000), gpod, "guaranteed")
                if pool_change == "narrowed":
                    tree.runc(g, await r.conn.create_container(create(gpod, g)))
                else:
                    await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=g))
                    await r.conn.state_change(api.REMOVE_CONTAINER, gpod, g)
                pool = r.svc.plugin.view().shared_pool
                assert await asyncio.to_thread(_until, lambda p=pool: tree.held(BURSTABLE) == p), pool_change
                assert await r.svc.reconciler.tick() == []
                assert BURSTABLE in r.svc.plugin.core.slices.told, pool_change  # not taken for drift
                # the next check, the pass still out: the container below it holds what it should
                later = asyncio.ensure_future(r.svc.reconciler.tick())
                await asyncio.sleep(0.2)
                monkeypatch.setattr(SlicePass, "finish", real_finish)
                gate.set()
                assert await later == [], pool_change
                assert r.svc.plugin.await_pass()
                assert await r.svc.reconciler.tick() == [], pool_change
                assert tree.held(BURSTABLE) == pool and tree.held(b) == online
    finally:
        gate.set()
        peer.close()


def _until(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
