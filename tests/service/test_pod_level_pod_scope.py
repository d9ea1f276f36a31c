"""The kubelet 1.36 alpha gate PodLevelResourceManagers in topology-manager pod scope (setting
`topology_manager.pod_level_resource_managers` with `scope = "pod"`; core/pod_scope_blocks.py,
engine/pod_level_admission.py): a Guaranteed pod with spec.resources whose whole spec the resource
annotator copied (`noderesource.dev/resources`) gets one block of its spec.resources CPUs at its first
container's create (topologymanager/scope_pod.go admitUsingPodResources at 1c9cf914,
cpumanager/policy_static.go AllocatePod at 62c7eac0); a Guaranteed-equivalent container gets an
exclusive slice of it (no CFS quota), every other one the pod pool = the block less the slices (its
quota kept); the block goes back with the pod's last container (RemoveContainer). Requests are the
kubelet model's, through the real stub and the fake runtime (helpers of test_pod_level_container_scope).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from svc_harness import assignments, checkpoint_entries, make_settings, running
from test_pod_level_container_scope import C1, C2, C3, C4, GiB, create_all, messages, pod6

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub.wire import TtrpcStatusError
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_1_9, RuntimeProfile
from tests.e2e import kubelet_model as km
from tests.e2e import kubelet_pod as kp
from tests.e2e.resource_annotator import pod_annotations as annotator

POD_SCOPE = {"scope": "pod", "pod_level_resource_managers": True}
ORDERS = [("c4", "c1", "c3", "c2"), ("c1", "c2", "c3", "c4")]  # c1 first: only the whole spec shows the pod
SIDECARS = "nri-pinner.io/sidecar-containers"


def cpus(rows: dict[str, dict[str, Any]], c: api.Container) -> CPUSet:
    return CPUSet.parse(rows[c.id]["cpus"])


def as_listed(c: dict[str, api.Container], replies: dict[str, api.CreateContainerResponse]) -> list[api.Container]:
    """What Synchronize lists after a restart: the created containers running with their cpusets."""
    listed = []
    for n, reply in replies.items():
        ctr = api.Container()
        ctr.CopyFrom(c[n])
        ctr.state = api.CONTAINER_RUNNING
        ctr.linux.resources.cpu.cpus = reply.adjust.linux.resources.cpu.cpus
        ctr.linux.resources.cpu.mems = reply.adjust.linux.resources.cpu.mems
        listed.append(ctr)
    return listed


def row_pod() -> tuple[api.PodSandbox, dict[str, api.Container]]:
    """TestValidatePodScopeResources "Valid: Pod-level == Guaranteed containers, has podSharedPool
    containers with request" (policy_static_test.go at 62c7eac0): 6 CPUs; c1 3/3, c2 2/2, c3 500m/1000m,
    c4 nothing."""
    return messages(pod6(C1, C2, C3, C4, annotations=annotator(C1, C2, C3, C4)))


@pytest.mark.parametrize("order", ORDERS, ids=["c4-first", "c1-first"])
@pytest.mark.parametrize("profile", [CONTAINERD_1_7_24, CONTAINERD_2_1_9], ids=lambda p: p.label)
async def test_the_block_its_slices_and_the_pod_pool(workdir: Path, profile: RuntimeProfile,
                                                     order: tuple[str, ...]) -> None:
    sandbox, c = row_pod()
    async with running(make_settings(workdir, topology_manager=POD_SCOPE), profile) as r:
        replies = await create_all(r, sandbox, c, order)
        rows = assignments(r.svc)
        c1, c2, c3, c4 = (cpus(rows, c[n]) for n in ("c1", "c2", "c3", "c4"))
        assert (rows[c["c1"].id]["exclusive"], rows[c["c2"].id]["exclusive"]) == (True, True)
        assert (rows[c["c3"].id]["exclusive"], rows[c["c4"].id]["exclusive"]) == (False, False)
        assert (len(c1), len(c2), c3) == (3, 2, c4)
        block = c1 | c2 | c4
        assert len(block) == 6 and not c1 & c2 and not (c1 | c2) & c4  # the pod pool = block less the slices
        node = r.svc.plugin.core.node
        assert node.state.pod_blocks["uid-plrm"].block == block
        assert not node.shared_pool & block and node.shared_pool | block == r.topology.online
        shown = r.svc.document()["pod_blocks"]["uid-plrm"]  # `nri-pinner status`
        assert (shown["block"], shown["pod_pool"], shown["exclusive"]) == (str(block), str(c4), ["c1", "c2"])
        # every container's cpuset is its part from its create on: no later reply moves one
        for n in order:
            assert CPUSet.parse(replies[n].adjust.linux.resources.cpu.cpus) == cpus(rows, c[n])
        quotas = {n: replies[n].adjust.linux.resources.cpu for n in order}
        assert {n: (q.HasField("quota"), q.quota.value) for n, q in quotas.items()} == {
            "c1": (True, -1), "c2": (True, -1), "c3": (False, 0), "c4": (False, 0)}
        # no memory: the Memory Manager's pod-level path is not built
        assert all(node.engine.memory_mems(node.state, "uid-plrm", n) is None for n in order)


async def test_an_empty_pod_pool_refuses_the_pods_first_create(workdir: Path) -> None:
    """TestValidatePodScopeResources "sum of exclusive container cpu requests equals pod budget": c1 3/3,
    c2' 3/3 and c4 (shared) in 6 CPUs: the first create is refused with the kubelet's reason, nothing held."""
    c2 = kp.Container("c2", km.ContainerResources(3000, 3000, GiB, GiB))
    sandbox, c = messages(pod6(C1, c2, C4, annotations=annotator(C1, c2, C4)))
    async with running(make_settings(workdir, topology_manager=POD_SCOPE)) as r:
        with pytest.raises(TtrpcStatusError, match="EmptyPodSharedPool: pod rejected, sum of exclusive container "
                                                   "cpu requests equals pod budget"):
            await create_all(r, sandbox, c, ("c4",))
        node = r.svc.plugin.core.node
        assert not node.state.pod_blocks and node.shared_pool == r.topology.online


async def test_init_container_and_sidecar_take_their_slices_first(workdir: Path) -> None:
    """AllocatePod: a sidecar's slice is out of everything after it; an exclusive regular init container
    slices the block less the sidecars'; the app containers slice what the sidecars left, the rest is
    the pod pool. 6 CPUs: proxy (sidecar) 1/1, setup (init) 4/4, c1 3/3, c4 nothing."""
    proxy = kp.Container("proxy", km.ContainerResources(1000, 1000, GiB, GiB), restartable=True)
    setup = kp.Container("setup", km.ContainerResources(4000, 4000, GiB, GiB))
    pod = kp.Pod("plrm", "default", "uid-plrm", (C1, C4), init_containers=(proxy, setup), resources=pod6().resources,
                 annotations={**annotator(C1, C4, init=(proxy, setup)), SIDECARS: "proxy"})
    sandbox, c = messages(pod)
    async with running(make_settings(workdir, topology_manager=POD_SCOPE)) as r:
        await create_all(r, sandbox, c, ("proxy", "setup", "c1", "c4"))
        rows = assignments(r.svc)
        p, s, c1, c4 = (cpus(rows, c[n]) for n in ("proxy", "setup", "c1", "c4"))
        assert all(rows[c[n].id]["exclusive"] for n in ("proxy", "setup", "c1"))
        assert (len(p), len(s), len(c1), len(c4)) == (1, 4, 3, 2)
        assert not p & (s | c1 | c4) and not c1 & c4 and len(p | s | c1 | c4) == 6


async def test_the_block_goes_back_with_the_pods_last_container(workdir: Path) -> None:
    sandbox, c = row_pod()
    async with running(make_settings(workdir, topology_manager=POD_SCOPE)) as r:
        await create_all(r, sandbox, c, ("c1", "c2", "c3", "c4"))
        node = r.svc.plugin.core.node
        for n in ("c1", "c2", "c3"):
            await r.conn.state_change(api.REMOVE_CONTAINER, sandbox, c[n])
            assert len(node.shared_pool) == 6  # nothing back while a container of the pod is left
        await r.conn.state_change(api.REMOVE_CONTAINER, sandbox, c["c4"])
        assert node.shared_pool == r.topology.online and not node.state.pod_blocks


async def test_the_sandbox_stop_gives_the_block_back(workdir: Path) -> None:
    sandbox, c = row_pod()
    async with running(make_settings(workdir, topology_manager=POD_SCOPE)) as r:
        await create_all(r, sandbox, c, ("c1", "c4"))
        await r.conn.state_change(api.STOP_POD_SANDBOX, sandbox)
        node = r.svc.plugin.core.node
        assert node.shared_pool == r.topology.online and not node.state.pod_blocks


@pytest.mark.parametrize("gate", [True, False], ids=["gate-on-without-annotation", "gate-off"])
async def test_without_the_whole_spec_or_the_gate_nothing_is_pinned(workdir: Path, gate: bool) -> None:
    """No annotation: the pod spec is unknown, so the pod gets what the gate off gives (never more
    than the kubelet): its containers run on the node's shared pool."""
    sandbox, c = messages(pod6(C1, C2, C3, C4, annotations={} if gate else annotator(C1, C2, C3, C4)))
    tm = POD_SCOPE if gate else {"scope": "pod"}
    async with running(make_settings(workdir, topology_manager=tm)) as r:
        await create_all(r, sandbox, c, ("c4", "c1", "c3", "c2"))
        rows = assignments(r.svc)
        assert not any(rows[c[n].id]["exclusive"] for n in c)
        assert r.svc.plugin.core.node.shared_pool == r.topology.online


async def test_a_restart_restores_the_block_from_the_checkpoint(workdir: Path) -> None:
    """Synchronize after a restart: the checkpoint's block is held again, each container keeps its
    part; a container created after the restart gets its part of the same block."""
    settings = make_settings(workdir, topology_manager=POD_SCOPE)
    sandbox, c = row_pod()
    async with running(settings) as r:
        replies = await create_all(r, sandbox, c, ("c1", "c2", "c4"))
        before = assignments(r.svc)
        block = r.svc.plugin.core.node.state.pod_blocks["uid-plrm"].block
    assert all("pod_block" in e for e in checkpoint_entries(settings).values())
    listed = as_listed(c, replies)
    with structlog.testing.capture_logs() as logs:
        async with running(settings, pods=[sandbox], containers=listed) as r:
            node = r.svc.plugin.core.node
            assert node.state.pod_blocks["uid-plrm"].block == block
            assert r.conn.sync_updates == []  # everyone already runs where the checkpoint says
    assert not [e for e in logs if str(e["event"]).startswith("state repaired")], logs
    async with running(settings, pods=[sandbox], containers=listed) as r:
        node = r.svc.plugin.core.node
        assert node.state.pod_blocks["uid-plrm"].block == block
        rows = assignments(r.svc)
        assert {n: rows[c[n].id]["cpus"] for n in ("c1", "c2", "c4")} == {
            n: before[c[n].id]["cpus"] for n in ("c1", "c2", "c4")}
        assert not node.shared_pool & block
        await create_all(r, sandbox, c, ("c3",))
        assert assignments(r.svc)[c["c3"].id]["cpus"] == before[c["c4"].id]["cpus"]


async def test_a_restart_without_the_checkpoint_leaves_the_pod_without_a_block(workdir: Path) -> None:
    """The checkpoint lost: nothing says where the block was, so its containers run on the shared pool
    and a container created later makes no new block (a sibling came first): the gate-off behaviour."""
    settings = make_settings(workdir, topology_manager=POD_SCOPE)
    sandbox, c = row_pod()
    async with running(settings) as r:
        replies = await create_all(r, sandbox, c, ("c1", "c4"))
    Path(settings.state.checkpoint).unlink()
    listed = as_listed(c, replies)
    async with running(settings, pods=[sandbox], containers=listed) as r:
        await create_all(r, sandbox, c, ("c2",))
        rows = assignments(r.svc)
        assert not any(rows[c[n].id]["exclusive"] for n in ("c1", "c2", "c4"))
        assert not r.svc.plugin.core.node.state.pod_blocks


@pytest.mark.parametrize("pod_cpus", [6, 7], ids=["fits-one-numa-node", "fits-none"])
async def test_single_numa_node_aligns_the_block_or_refuses_the_pod(workdir: Path, pod_cpus: int) -> None:
    """The pod's one merge (scope_pod.go admitUsingPodResources): its CPU hints for the whole block. 12 CPUs,
    2 NUMA nodes of 6, CPU 0 reserved: 6 fit on node 1 only; 7 fit on none → TopologyAffinityError."""
    level = km.PodLevel(pod_cpus * 1000, pod_cpus * 1000, 6 * GiB, 6 * GiB)
    pod = kp.Pod("plrm", "default", "uid-plrm", (C1, C4), resources=level, annotations=annotator(C1, C4))
    sandbox, c = messages(pod)
    settings = make_settings(workdir, topology_manager={**POD_SCOPE, "policy": "single-numa-node"})
    async with running(settings) as r:
        node = r.svc.plugin.core.node
        if pod_cpus == 7:
            with pytest.raises(TtrpcStatusError, match="TopologyAffinityError: pod with pod-level resources"):
                await create_all(r, sandbox, c, ("c4",))
            assert not node.state.pod_blocks and node.shared_pool == r.topology.online
            return
        await create_all(r, sandbox, c, ("c4", "c1"))
        block = node.state.pod_blocks["uid-plrm"].block
        assert block == r.topology.numa_cpus[1]
        assert node.state.pod_hints["uid-plrm"].affinity == 0b10


async def test_a_block_that_would_empty_the_shared_pool_without_reserved_cpus_is_refused(workdir: Path) -> None:
    """No reserved CPUs (strict: the kubelet requires some) and a block of every CPU: refused as an exclusive
    admission that empties the shared pool is (Engine.admit), never leaving shared containers no cpuset."""
    level = km.PodLevel(12000, 12000, 6 * GiB, 6 * GiB)
    pod = kp.Pod("plrm", "default", "uid-plrm", (C1, C4), resources=level, annotations=annotator(C1, C4))
    sandbox, c = messages(pod)
    settings = make_settings(workdir, topology_manager=POD_SCOPE, cpu_manager={"reserved_cpus": ""})
    async with running(settings) as r:
        with pytest.raises(TtrpcStatusError, match="InsufficientCPUs: taking the pod's block of 12 CPUs"):
            await create_all(r, sandbox, c, ("c4",))
        assert not r.svc.plugin.core.node.state.pod_blocks
