"""The kubelet 1.36 alpha gate PodLevelResourceManagers in topology-manager container scope (setting
`topology_manager.pod_level_resource_managers`, core/own_requests.py, pod_level.py): in a
Guaranteed pod that sets spec.resources, a container whose own CPU and memory requests are set and
equal to its own limits (cm/qos IsContainerEquivalentQOSGuaranteed, qos/helpers.go:27-43 at 5d7e2a39),
CPU whole, is pinned from the node (cpumanager/policy_static.go guaranteedCPUs at 62c7eac0); the others
stay on the shared pool. Only what names the container's own spec proves it (README "Pod-level resource
managers"). Through the real stub and the fake runtime's wire format; every request is the kubelet
model's (tests/e2e/kubelet_model.py, kubelet_pod.py: getCPULimit / getMemoryLimit give a container
without its own limit the pod's), converted as containerd converts it (testkit/pod_builders.py).

The pod shape is the kubelet's TestValidatePodScopeResources row "Valid: Pod-level == Guaranteed
containers, has podSharedPool containers with request" (policy_static_test.go at the same copy: 6 CPUs;
c1 3/3, c2 2/2, c3 500m/1000m, c4 nothing), here in container scope with memory of their own for the
Guaranteed-equivalent ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from svc_harness import PERIOD, assignments, cpuset_updates, make_settings, new_service, running
from test_cgroup_pool import start, written
from test_pod_quota import cpu_dir, pod_quota

from nri_pinner.core.intent import intent_from_nri
from nri_pinner.edge.request_intake import memory_policy
from nri_pinner.engine.admission_engine import Engine
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_1_9, RuntimeProfile
from testkit.pod_builders import nri_container_from_cri, nri_pod_from_cri
from tests.e2e import kubelet_model as km
from tests.e2e import kubelet_pod as kp
from tests.e2e.resource_annotator import pod_annotations as annotator

GiB = 1 << 30
NODE = km.Node(memory_capacity=64 * GiB)
IMAGE = kp.Image("sha256:" + "2" * 64)
POD_6 = km.PodLevel(cpu_milli_request=6000, cpu_milli_limit=6000, memory_request=6 * GiB, memory_limit=6 * GiB)
C1 = kp.Container("c1", km.ContainerResources(3000, 3000, GiB, GiB))  # Guaranteed-equivalent: pinned
C2 = kp.Container("c2", km.ContainerResources(2000, 2000, GiB, GiB))  # Guaranteed-equivalent: pinned
C3 = kp.Container("c3", km.ContainerResources(500, 1000))  # request below its own limit: shared
C4 = kp.Container("c4")  # nothing of its own: the pod's limit as quota and shares, shared
GATED = {"pod_level_resource_managers": True}
ORDERS = [("c4", "c1", "c3", "c2"), ("c1", "c2", "c3", "c4")]  # c4 shows the pod at its create


def messages(pod: kp.Pod) -> tuple[api.PodSandbox, dict[str, api.Container]]:
    sandbox = nri_pod_from_cri(kp.sandbox_config(pod, NODE), f"sb-{pod.name}")
    return sandbox, {c.name: nri_container_from_cri(kp.container_config(pod, c.name, NODE, IMAGE), sandbox,
                                                    f"{pod.name}-{c.name}")
                     for c in pod.init_containers + pod.containers}


def pod6(*containers: kp.Container, annotations: dict[str, str] | None = None) -> kp.Pod:
    pod = kp.Pod("plrm", "default", "uid-plrm", containers, resources=POD_6, annotations=annotations or {})
    assert pod.qos is km.QOSClass.GUARANTEED
    return pod


async def create_all(r: Any, sandbox: api.PodSandbox, c: dict[str, api.Container],
                     order: tuple[str, ...]) -> dict[str, api.CreateContainerResponse]:
    replies = {}
    for name in order:
        reply = await r.conn.create_container(api.CreateContainerRequest(pod=sandbox, container=c[name]))
        assert reply is not None
        replies[name] = reply
    return replies


@pytest.mark.parametrize("order", ORDERS, ids=["known-first", "shown-later"])
@pytest.mark.parametrize("profile", [CONTAINERD_1_7_24, CONTAINERD_2_1_9], ids=lambda p: p.label)
async def test_gate_on_pins_only_the_guaranteed_equivalent_containers(
        workdir: Path, profile: RuntimeProfile, order: tuple[str, ...]) -> None:
    """known-first: c4's create shows the pod (the annotator lists it without limits while it has the
    pod's quota). shown-later: c1 and c2 look like an ordinary pod's and are pinned; c3's create shows
    it (request below limit): under the gate c1 and c2 keep their CPUs, as if known at the first create."""
    sandbox, c = messages(pod6(C1, C2, C3, C4, annotations=annotator(C1, C2, C3, C4)))
    async with running(make_settings(workdir, topology_manager=GATED), profile) as r:
        shared_before = str(r.topology.online)
        replies = await create_all(r, sandbox, c, order)
        rows = assignments(r.svc)
        assert {n: len(rows[c[n].id]["cpus"].split(",")) if rows[c[n].id]["exclusive"] else 0
                for n in ("c1", "c2", "c3", "c4")} == {"c1": 3, "c2": 2, "c3": 0, "c4": 0}
        pinned = {cpu for n in ("c1", "c2") for cpu in rows[c[n].id]["cpus"].split(",")}
        assert rows[c["c3"].id]["cpus"] == rows[c["c4"].id]["cpus"] != shared_before
        assert not pinned & set(rows[c["c4"].id]["cpus"].split(","))
        assert all(rows[c[n].id]["pod_level_resources"] for n in ("c3", "c4"))
        for n in ("c1", "c2"):  # never moved: no update for them on a later reply
            assert all(c[n].id not in cpuset_updates(replies[m].update) for m in order)
        # quota: off for the pinned ones (DisableCPUQuotaWithExclusiveCPUs), the kubelet's kept for the others
        quotas = {n: replies[n].adjust.linux.resources.cpu for n in order}
        assert {n: (q.HasField("quota"), q.quota.value) for n, q in quotas.items()} == {
            "c1": (True, -1), "c2": (True, -1), "c3": (False, 0), "c4": (False, 0)}


@pytest.mark.parametrize("order", ORDERS, ids=["known-first", "shown-later"])
async def test_gate_off_pins_none_of_them(workdir: Path, order: tuple[str, ...]) -> None:
    """The same pod with the gate off (the kubelet's default, v1.34-v1.36): nothing exclusive."""
    sandbox, c = messages(pod6(C1, C2, C3, C4, annotations=annotator(C1, C2, C3, C4)))
    async with running(make_settings(workdir)) as r:
        await create_all(r, sandbox, c, order)
        rows = assignments(r.svc)
        assert not any(rows[c[n].id]["exclusive"] for n in order)


async def test_without_proof_of_its_own_requests_nothing_is_pinned(workdir: Path) -> None:
    """No annotator: c1 (own 3 CPUs / 1 GiB) carries nothing that shows its memory request, which the
    kubelet never sends, so it stays shared once the pod is known (never over-allocate); a container
    with nothing of its own ("a", the pod's limit as quota and shares) is pinned at its create as a
    one-container pod of 6 CPUs would be, and goes to the pool when "b" shows the pod."""
    a, b = kp.Container("a"), kp.Container("b")
    sandbox, c = messages(pod6(a, b, C1))
    async with running(make_settings(workdir, topology_manager=GATED)) as r:
        replies = await create_all(r, sandbox, c, ("a", "b", "c1"))
        shared = str(r.topology.online)
        assert len(replies["a"].adjust.linux.resources.cpu.cpus.split(",")) == 6
        assert cpuset_updates(replies["b"].update)[c["a"].id][0] == shared
        rows = assignments(r.svc)
        assert not any(rows[c[n].id]["exclusive"] for n in ("a", "b", "c1"))


async def test_the_cpu_annotation_proves_it_when_the_memory_limit_is_its_own(workdir: Path) -> None:
    """`nri-pinner.io/cpu.<name>` = "3": request = limit, and its memory limit (1 GiB) is below the
    pod's 6 GiB, so its own; "big" claims 6 CPUs with nothing of its own: its memory limit is the pod's,
    so nothing shows it is its own and it stays shared."""
    big = kp.Container("big")
    ann = {"nri-pinner.io/pod-level-resources": "true", "nri-pinner.io/cpu.c1": "3", "nri-pinner.io/cpu.big": "6"}
    sandbox, c = messages(pod6(C1, big, annotations=ann))
    assert (intent_from_nri(sandbox, c["c1"]).own_milli, intent_from_nri(sandbox, c["big"]).own_milli) == (3000, 0)
    async with running(make_settings(workdir, topology_manager=GATED)) as r:
        await create_all(r, sandbox, c, ("c1", "big"))
        rows = assignments(r.svc)
        assert (rows[c["c1"].id]["exclusive"], rows[c["big"].id]["exclusive"]) == (True, False)


def test_a_memory_request_below_its_limit_is_not_guaranteed_equivalent() -> None:
    """IsContainerEquivalentQOSGuaranteed reads memory too: 2 whole CPUs with 512 MiB of 1 GiB is not."""
    half = kp.Container("half", km.ContainerResources(2000, 2000, GiB // 2, GiB))
    sandbox, c = messages(pod6(half, C2, annotations=annotator(half, C2)))
    assert (intent_from_nri(sandbox, c["half"]).own_milli, intent_from_nri(sandbox, c["c2"]).own_milli) == (0, 2000)


@pytest.mark.parametrize("gate", [True, False], ids=["gate-on", "gate-off"])
async def test_the_pod_cgroup_keeps_no_quota_while_a_container_holds_exclusive_cpus(workdir: Path, gate: bool) -> None:
    """c1 pinned first (quota -1, the pod cgroup's removed by a pass); c4's create shows the pod. Gate on:
    c1 keeps its CPUs, so the pod keeps no quota (the kubelet's PodHasExclusiveCPUs). Gate off: c1 is
    demoted and the pod cgroup gets the sandbox's 600000 back."""
    sandbox, c = messages(pod6(C1, C4, annotations=annotator(C1, C4)))
    settings = make_settings(workdir, topology_manager=GATED if gate else {})
    root = Path(settings.reconcile.cgroup_root)
    cpu_dir(root, sandbox.linux.cgroup_parent).joinpath("cpu.cfs_quota_us").write_text(f"{6 * PERIOD}\n")
    async with running(settings) as r:
        reply = (await create_all(r, sandbox, c, ("c1",)))["c1"]
        assert reply.adjust.linux.resources.cpu.quota.value == -1
        start(root, c["c1"], reply.adjust.linux.resources.cpu.cpus, reply.adjust.linux.resources.cpu.mems)
        await r.conn.state_change(api.START_CONTAINER, sandbox, c["c1"])
        await written(r.svc)
        assert pod_quota(root, sandbox).read_text() == "-1"
        reply = (await create_all(r, sandbox, c, ("c4",)))["c4"]
        assert ("uid-plrm" in r.svc.plugin.core.quotas.removed) is gate  # gate on: nothing to put back
        await written(r.svc)
        assert assignments(r.svc)[c["c1"].id]["exclusive"] is gate
        assert (c["c1"].id in cpuset_updates(reply.update)) is not gate
        assert pod_quota(root, sandbox).read_text() == ("-1" if gate else str(6 * PERIOD))


@pytest.mark.parametrize("order", [("c4", "c1"), ("c1", "c4")], ids=["known-first", "shown-later"])
@pytest.mark.parametrize("gate", [True, False], ids=["gate-on", "gate-off"])
async def test_the_memory_manager_serves_only_the_pinned_container(
        workdir: Path, gate: bool, order: tuple[str, ...]) -> None:
    """Memory Manager on: getContainerRequestedResources (memorymanager/policy_static.go at 030880a5) asks
    the pinned container's memory (its own 1 GiB) and nothing for the others; gate off, nothing at all."""
    settings = make_settings(workdir, topology_manager={"policy": "single-numa-node", **(GATED if gate else {})},
                             hints={"providers": ["cpu", "memory"]}, memory_manager={"reserved_memory": "0:memory=1Gi"})
    topo = discover(settings.sysfs_root)
    svc = new_service(settings, Engine.from_settings(settings, topo, memory=memory_policy(settings, topo)))
    sandbox, c = messages(pod6(C1, C4, annotations=annotator(C1, C4)))
    async with running(settings, svc=svc) as r:
        await create_all(r, sandbox, c, order)
        node = r.svc.plugin.core.node
        held = {n: node.engine.memory_mems(node.state, "uid-plrm", n) is not None for n in ("c1", "c4")}
        assert held == {"c1": gate, "c4": False}
