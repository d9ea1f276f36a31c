"""No false drift (issue 45): the reconcile timer checks started containers only (core/repairs.py).

Seen with a real kubelet under the systemd driver: containerd runs runc create inside CRI
StartContainer, before it tells plugins; meanwhile the container's scope exists with an empty
cgroup-v2 `cpuset.cpus`, and the timer called that drift and sent a CRI update to a container still
being created. Here on a cgroup-v2 tree in the systemd driver's layout, in tmp, with cgroup writes on
(the packaged default) and a CRI socket (the repair path of NRI < v0.12.1) that records every call;
systemd's bus is off (never the host's). A started container whose set is empty still is repaired.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from svc_harness import Running, container, create, make_settings, pod, running
from test_service_reconcile import FakeCRI, serve_cri

from nri_pinner.edge.gen import cri_repair_pb2 as cri
from nri_pinner.engine.cpuset import EMPTY, CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_1_9, RuntimeProfile

PROFILES = [CONTAINERD_1_7_24, CONTAINERD_2_1_9]  # both repair through CRI


def systemd_pod(name: str, qos: str = "guaranteed") -> api.PodSandbox:
    """A kubelet pod under the systemd driver: its parent a slice (the kubelet escapes the uid's dashes)."""
    p = pod(name, qos, uid=f"{name}_0f1e")
    tier = "" if qos == "guaranteed" else f"-{qos}"
    p.linux.cgroup_parent = f"kubepods{tier}-pod{p.uid}.slice"
    return p


def systemd_container(sandbox: api.PodSandbox, name: str, request: int = 0, limit: int = 0,
                      **fields: Any) -> api.Container:
    c = container(sandbox, name, request, limit, **fields)
    c.linux.cgroups_path = f"{sandbox.linux.cgroup_parent}:cri-containerd:{c.id}"  # runc's systemd form
    return c


BPOD, GPOD = systemd_pod("burst", "burstable"), systemd_pod("gold")
B, LATE = systemd_container(BPOD, "app", 100), systemd_container(BPOD, "late", 100)
G = systemd_container(GPOD, "app", 2000, 2000)
POD_OF = {B.id: BPOD, LATE.id: BPOD, G.id: GPOD}


def make_scope(root: Path, c: api.Container) -> Path:
    """What systemd makes for runc's StartTransientUnit: the scope, its cpuset files empty (cgroup v2:
    the parent's CPUs) until runc writes them. Slices nest by their dashes."""
    parent = POD_OF[c.id].linux.cgroup_parent.removesuffix(".slice").split("-")
    slices = ["-".join(parent[: i + 1]) + ".slice" for i in range(len(parent))]
    d = root.joinpath(*slices, f"cri-containerd-{c.id}.scope")
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text("\n")
    (d / "cpuset.mems").write_text("\n")
    return d


def runc_writes(scope: Path, cpus: str, mems: str) -> None:
    (scope / "cpuset.cpus").write_text(cpus + "\n")
    (scope / "cpuset.mems").write_text(mems + "\n")


def repairs(r: Running) -> dict[str, float]:
    """path -> repairs counted (every path, including those only created when first counted)."""
    return {s.labels["path"]: s.value for m in r.svc.metrics.registry.collect()
            if m.name == "nri_pinner_reconcile_repairs" for s in m.samples if s.name.endswith("_total")}


@dataclass
class Node:
    r: Running
    root: Path  # the cgroup-v2 mount
    cri: FakeCRI

    async def settled(self) -> None:
        """The cgroup pass for the newest change is done (a tick before it would see it half-way)."""
        assert await asyncio.to_thread(self.r.svc.plugin.await_pass, 5)

    async def create(self, c: api.Container) -> tuple[str, str]:
        reply = await self.r.conn.create_container(create(POD_OF[c.id], c))
        assert reply is not None
        await self.settled()
        cpu = reply.adjust.linux.resources.cpu
        return cpu.cpus, cpu.mems

    async def start(self, c: api.Container, scope: Path, cpus: str, mems: str) -> None:
        """runc create has written the scope; then the runtime's StartContainer (answered once it may run)."""
        runc_writes(scope, cpus, mems)
        assert await self.r.conn.state_change(api.START_CONTAINER, POD_OF[c.id], c)
        await self.settled()


def root_of(workdir: Path) -> Path:
    root = workdir / "cgroup"
    root.mkdir(exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    return root


@contextlib.asynccontextmanager
async def systemd_node(workdir: Path, profile: RuntimeProfile, **runtime: Any) -> AsyncIterator[Node]:
    root = root_of(workdir)  # before the service starts: it looks whether it can write there
    settings = make_settings(workdir, reconcile={"cri_socket": str(workdir / "cri.sock"), "systemd_bus": "",
                                                 "cgroup_root": str(root)})

    async def relay(_request: cri.UpdateContainerResourcesRequest) -> api.UpdateContainerResponse:
        return api.UpdateContainerResponse()  # recorded by FakeCRI; none is expected unless said

    fake = FakeCRI(relay)
    server = await serve_cri(settings.reconcile.cri_socket, fake)
    try:
        async with running(settings, profile, forbid_unsolicited_updates=True, **runtime) as r:
            try:
                yield Node(r, root, fake)
            finally:
                assert r.svc.reconciler.cri is not None
                await r.svc.reconciler.cri.close()
    finally:
        await server.stop(None)


@contextlib.contextmanager
def drift_warnings() -> Iterator[list[dict[str, Any]]]:
    found: list[dict[str, Any]] = []
    with structlog.testing.capture_logs() as logs:
        yield found
    found += [dict(e) for e in logs if e["event"] == "cpuset drift repaired"]


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.label)
async def test_scopes_runc_has_not_written_yet_are_no_drift(workdir: Path, profile: RuntimeProfile) -> None:
    with drift_warnings() as warnings:
        async with systemd_node(workdir, profile) as n:
            r = n.r
            b_scope = make_scope(n.root, B)
            await n.start(B, b_scope, *await n.create(B))
            g_set, late_set = await n.create(G), await n.create(LATE)  # the exclusive one and a shared one
            # their CRI StartContainer has begun: systemd made the scopes, runc has not written them
            g_scope, late_scope = make_scope(n.root, G), make_scope(n.root, LATE)
            for _ in range(2):  # two drift periods
                assert await r.svc.reconciler.tick() == []
            assert n.cri.requests == [] and r.conn.updates == []
            assert set(repairs(r).values()) == {0.0}
            assert (g_scope / "cpuset.cpus").read_text() == (late_scope / "cpuset.cpus").read_text() == "\n"

            await n.start(G, g_scope, *g_set)
            await n.start(LATE, late_scope, *late_set)
            assert await r.svc.reconciler.tick() == []  # started, each holds its set
            exclusive = CPUSet.parse(g_set[0])
            assert CPUSet.parse((b_scope / "cpuset.cpus").read_text()) == r.topology.online - exclusive
            assert n.cri.requests == [] and set(repairs(r).values()) == {0.0}
    assert warnings == []


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.label)
async def test_a_restart_between_create_and_start_checks_the_container_once_started(
        workdir: Path, profile: RuntimeProfile) -> None:
    # containerd lists a container CREATED until its task has started: at the restart the timer leaves
    # it alone (its scope half-made), and checks it from the StartContainer that follows
    exclusive, shared = CPUSet.parse("1,7"), CPUSet.parse("0,2-6,8-11")  # node 1 holds the odd CPUs
    b = systemd_container(BPOD, "app", 100, cpus="0-11", mems="0,1")
    g = systemd_container(GPOD, "app", 2000, 2000, cpus=str(exclusive), mems="1", state=api.CONTAINER_CREATED)
    root = root_of(workdir)
    b_scope, g_scope = make_scope(root, b), make_scope(root, g)
    runc_writes(b_scope, str(shared), "0,1")  # narrowed by the previous run's pass
    with drift_warnings() as warnings:
        async with systemd_node(workdir, profile, pods=[BPOD, GPOD], containers=[b, g]) as n:
            await n.settled()
            assert n.r.svc.plugin.view().containers[g.id].started is False
            for _ in range(2):
                assert await n.r.svc.reconciler.tick() == []
            assert n.cri.requests == [] and set(repairs(n.r).values()) == {0.0}

            await n.start(g, g_scope, str(exclusive), "1")
            assert await n.r.svc.reconciler.tick() == []
            runc_writes(g_scope, "", "1")  # started: an empty set is its parent's CPUs, a real drift
            [drift] = await n.r.svc.reconciler.tick()
            assert (drift.container_id, drift.actual, drift.desired) == (g.id, EMPTY, exclusive)
            assert CPUSet.parse((g_scope / "cpuset.cpus").read_text()) == exclusive
    assert [w["container_id"] for w in warnings] == [g.id[:12]]


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.label)
async def test_a_started_container_whose_set_is_empty_is_repaired(workdir: Path, profile: RuntimeProfile) -> None:
    with drift_warnings() as warnings:
        async with systemd_node(workdir, profile) as n:
            r = n.r
            b_scope, g_scope = make_scope(n.root, B), make_scope(n.root, G)
            await n.start(B, b_scope, *await n.create(B))
            g_set = await n.create(G)
            await n.start(G, g_scope, *g_set)
            pool = r.topology.online - CPUSet.parse(g_set[0])
            assert await r.svc.reconciler.tick() == []

            (b_scope / "cpuset.cpus").write_text("\n")  # the parent's CPUs: G's exclusive ones too
            [drift] = await r.svc.reconciler.tick()
            assert (drift.container_id, drift.actual, drift.desired) == (B.id, EMPTY, pool)
            assert CPUSet.parse((b_scope / "cpuset.cpus").read_text()) == pool  # rewritten by a pass
            assert repairs(r) == {"cri": 0.0, "next-reply": 0.0, "cgroup": 1.0}
            assert n.cri.requests == []
    [warning] = warnings
    assert (warning["container_id"], warning["actual"], warning["desired"], warning["path"]) == (
        B.id[:12], "empty (its parent's CPUs)", str(pool), "cgroup")
