"""Exited containers of kubelet pods, with containers shaped as the kubelet sends them: no
`io.kubernetes.container.type` annotation (v1.32 pkg/kubelet/kuberuntime/labels.go writes none).

The kubelet's rule (v1.32; plugin.py's module doc cites the lines): an exited container's exclusive
CPUs stay its pod's (PostStopContainer releases nothing, reconcileState skips terminated containers);
a restarted container gets the same CPUs (Allocate: "already present in state"); a regular init
container's CPUs are reused by its pod's next container (updateCPUsToReuse / allocateCPUs); they go
back when the pod goes (removeStaleState over activePods)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from svc_harness import (
    Running,
    assignments,
    checkpoint_entries,
    container,
    cpuset_updates,
    create,
    document,
    make_settings,
    new_service,
    pod,
    running,
)

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.service.app import Service
from testkit.fake_kubelet import FakeKubelet
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_3_0


def kubelet_container(sandbox: api.PodSandbox, name: str, request: int = 0, limit: int = 0, *, cid: str | None = None,
                      cpus: str = "", mems: str = "", state: int = api.CONTAINER_RUNNING) -> api.Container:
    """As the kubelet sends it: its labels, no container-type annotation."""
    c = container(sandbox, name, request, limit, cid=cid, cpus=cpus, mems=mems, state=state)
    c.labels.update({"io.kubernetes.pod.namespace": sandbox.namespace, "io.kubernetes.pod.name": sandbox.name,
                     "io.kubernetes.pod.uid": sandbox.uid, "io.kubernetes.container.name": name})
    return c


def exited(c: api.Container, code: int = 0) -> api.Container:
    out = api.Container()
    out.CopyFrom(c)
    out.state = api.CONTAINER_STOPPED
    out.exit_code = code
    return out


def shared_desired(svc: Service) -> dict[str, CPUSet]:
    """Every running shared container's desired cpuset."""
    tr = svc.plugin.node
    out = {}
    for t in tr.containers.values():
        a = tr.assignment(t)
        if not t.stopped and (a is None or not a.exclusive):
            out[t.container_id] = tr.desired(t)[0]
    return out


async def test_init_container_without_marker_keeps_its_cpus_for_the_app_container(workdir: Path) -> None:
    """Fails on the old code: it took the unmarked init container for an app container and released
    its CPUs to the shared pool at its exit."""
    settings = make_settings(workdir, reconcile={"cgroup_writes": False})
    async with running(settings, CONTAINERD_1_7_24) as r:
        online = r.topology.online
        bpod, gpod = pod("burst", "burstable"), pod("gold")
        b = kubelet_container(bpod, "app", 100)
        init, app = kubelet_container(gpod, "setup", 2000, 2000), kubelet_container(gpod, "app", 2000, 2000)
        await r.conn.create_container(create(bpod, b))
        reply = await r.conn.create_container(create(gpod, init))
        assert reply is not None
        init_cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(init_cpus) == 2

        stopped = await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=exited(init)))
        assert stopped is not None and stopped.update == []  # nothing grows onto the pod's CPUs
        assert all(cpus.isdisjoint(init_cpus) for cpus in shared_desired(r.svc).values())
        assert document(r.svc)["pools"]["shared"] == str(online - init_cpus)
        assert checkpoint_entries(settings)[init.id]["current"] == str(init_cpus)

        reply = await r.conn.create_container(create(gpod, app))
        assert reply is not None
        assert CPUSet.parse(reply.adjust.linux.resources.cpu.cpus) == init_cpus  # reused, as the kubelet does
        assert reply.update == []
        assert all(cpus.isdisjoint(init_cpus) for cpus in shared_desired(r.svc).values())
        rows = assignments(r.svc)
        assert rows[init.id]["init"] and not rows[app.id]["init"]

        # the pod goes: StopPodSandbox gives everything back
        await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=exited(app, 137)))
        assert document(r.svc)["pools"]["shared"] == str(online - init_cpus)
        assert await r.conn.state_change(api.STOP_POD_SANDBOX, gpod)
        assert document(r.svc)["pools"]["shared"] == str(online)
        assert shared_desired(r.svc)[b.id] == online
        assert await r.conn.state_change(api.REMOVE_POD_SANDBOX, gpod)
        assert set(assignments(r.svc)) == {b.id}


async def test_a_restarted_container_gets_its_cpus_back_and_they_are_never_shared(workdir: Path) -> None:
    settings = make_settings(workdir, reconcile={"cgroup_writes": False})
    async with running(settings, CONTAINERD_2_3_0) as r:
        online = r.topology.online
        bpod, gpod = pod("burst", "burstable"), pod("gold")
        await r.conn.create_container(create(bpod, kubelet_container(bpod, "app", 100)))
        app = kubelet_container(gpod, "app", 2000, 2000)
        reply = await r.conn.create_container(create(gpod, app))
        assert reply is not None
        cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)

        stopped = await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=exited(app, 1)))
        assert stopped is not None and stopped.update == []
        assert document(r.svc)["pools"]["shared"] == str(online - cpus)

        again = kubelet_container(gpod, "app", 2000, 2000, cid="gold-app-restart-1")
        reply = await r.conn.create_container(create(gpod, again))
        assert reply is not None
        assert CPUSet.parse(reply.adjust.linux.resources.cpu.cpus) == cpus  # kubelet: "already present"
        assert await r.conn.state_change(api.REMOVE_CONTAINER, gpod, app)  # the GC removes the old instance
        assert assignments(r.svc)[again.id]["cpus"] == str(cpus)
        assert document(r.svc)["pools"]["shared"] == str(online - cpus)


async def first_exits_then_second(r: Running, gpod: api.PodSandbox, exit_code: int) -> tuple[CPUSet, CPUSet]:
    """Guaranteed "first" created, then stopped with `exit_code`, then "second" created: their CPUs."""
    first = kubelet_container(gpod, "first", 2000, 2000)
    reply = await r.conn.create_container(create(gpod, first))
    assert reply is not None
    first_cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
    await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=exited(first, exit_code)))
    reply = await r.conn.create_container(create(gpod, kubelet_container(gpod, "second", 2000, 2000)))
    assert reply is not None
    return first_cpus, CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)


async def test_an_app_container_taken_for_an_init_container_gets_new_cpus_when_it_comes_back(
        workdir: Path) -> None:
    """Without PodResources or annotations, a container that exited 0 before its pod's next create is
    taken for an init container; if it is created again it was not, and must not share the CPUs a
    sibling reused."""
    settings = make_settings(workdir, reconcile={"cgroup_writes": False})
    async with running(settings, CONTAINERD_2_3_0) as r:
        gpod = pod("gold")
        first_cpus, second_cpus = await first_exits_then_second(r, gpod, 0)
        assert second_cpus == first_cpus  # reused, as after an init container
        again = kubelet_container(gpod, "first", 2000, 2000, cid="gold-first-1")
        reply = await r.conn.create_container(create(gpod, again))
        assert reply is not None
        cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(cpus) == 2 and cpus.isdisjoint(second_cpus)
        assert document(r.svc)["pools"]["exclusive"] == str(cpus | second_cpus)


async def test_an_app_container_that_failed_is_not_reused(workdir: Path) -> None:
    settings = make_settings(workdir, reconcile={"cgroup_writes": False})
    async with running(settings, CONTAINERD_2_3_0) as r:
        first_cpus, second_cpus = await first_exits_then_second(r, pod("gold"), 2)
        # an init container that fails is retried, never followed: it was an app container
        assert second_cpus.isdisjoint(first_cpus)


async def test_kept_cpus_survive_a_plugin_restart(workdir: Path) -> None:
    settings = make_settings(workdir, reconcile={"cgroup_writes": False})
    gpod, bpod = pod("gold"), pod("burst", "burstable")
    init = kubelet_container(gpod, "setup", 2000, 2000)
    b = kubelet_container(bpod, "app", 100)
    async with running(settings, CONTAINERD_2_3_0) as r:
        await r.conn.create_container(create(bpod, b))
        reply = await r.conn.create_container(create(gpod, init))
        assert reply is not None
        init_cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=exited(init)))
        assert checkpoint_entries(settings)[init.id]["stopped"]

    online = CPUSet.parse("0-11")
    listed = [exited(kubelet_container(gpod, "setup", 2000, 2000, cpus=str(init_cpus))),
              kubelet_container(bpod, "app", 100, cpus=str(online - init_cpus), mems="0,1")]
    async with running(settings, CONTAINERD_2_3_0, svc=new_service(settings), pods=[gpod, bpod],
                       containers=listed) as r:
        assert r.conn.sync_updates == []
        assert document(r.svc)["pools"]["shared"] == str(online - init_cpus)
        reply = await r.conn.create_container(create(gpod, kubelet_container(gpod, "app", 2000, 2000)))
        assert reply is not None
        assert CPUSet.parse(reply.adjust.linux.resources.cpu.cpus) == init_cpus
        assert await r.conn.state_change(api.STOP_POD_SANDBOX, gpod)
        assert document(r.svc)["pools"]["shared"] == str(online)


async def test_a_recreated_sandbox_keeps_its_new_containers_when_the_old_one_is_removed(workdir: Path) -> None:
    settings = make_settings(workdir, reconcile={"cgroup_writes": False})
    async with running(settings, CONTAINERD_2_3_0) as r:
        old_sb = pod("gold")
        first = kubelet_container(old_sb, "app", 2000, 2000)
        await r.conn.create_container(create(old_sb, first))
        await r.conn.stop_container(api.StopContainerRequest(pod=old_sb, container=exited(first, 137)))
        assert await r.conn.state_change(api.STOP_POD_SANDBOX, old_sb)
        new_sb = pod("gold")
        new_sb.id = "sb-gold-2"
        again = kubelet_container(new_sb, "app", 2000, 2000, cid="gold-app-2")
        reply = await r.conn.create_container(create(new_sb, again))
        assert reply is not None
        cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert await r.conn.state_change(api.REMOVE_POD_SANDBOX, old_sb)
        assert document(r.svc)["pools"]["exclusive"] == str(cpus)
        assert assignments(r.svc)[again.id]["cpus"] == str(cpus)


# -- what tells init from app: PodResources, noderesource.dev/resources ------------------------------

async def test_podresources_says_which_stopped_container_was_an_init_container(workdir: Path) -> None:
    kubelet = FakeKubelet(str(workdir / "kubelet.sock"))
    settings = make_settings(workdir, reconcile={"cgroup_writes": False},
                             hints={"providers": ["cpu", "podresources"]},
                             podresources={"socket": kubelet.socket_path, "refresh_seconds": 3600})
    with kubelet:
        svc = new_service(settings)
        assert svc.podresources is not None  # not started: the test lists when it wants to
        gpod = pod("gold")
        kubelet.set_pod(gpod.namespace, gpod.name, {"a": [], "b": []})  # app containers only
        async with running(settings, CONTAINERD_2_3_0, svc=svc) as r:
            setup, a = kubelet_container(gpod, "setup", 2000, 2000), kubelet_container(gpod, "a", 2000, 2000)
            reply = await r.conn.create_container(create(gpod, setup))
            assert reply is not None
            setup_cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
            # the List lags the create: the stop decides nothing and asks for a new List
            await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=exited(setup)))
            assert svc.podresources._kick.is_set()
            assert await asyncio.to_thread(svc.podresources.fetch)
            reply = await r.conn.create_container(create(gpod, a))
            assert reply is not None
            a_cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
            assert a_cpus == setup_cpus
            rows = assignments(r.svc)
            assert rows[setup.id]["init"] and not rows[a.id]["init"]
            # "a" exits 0 before "b" is created: listed, so an app container; "b" does not reuse its CPUs
            await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=exited(a)))
            assert checkpoint_entries(settings)[a.id]["role"] == "podresources"
            reply = await r.conn.create_container(create(gpod, kubelet_container(gpod, "b", 2000, 2000)))
            assert reply is not None
            assert CPUSet.parse(reply.adjust.linux.resources.cpu.cpus).isdisjoint(a_cpus)


def annotated(sandbox: api.PodSandbox, doc: object) -> api.PodSandbox:
    sandbox.annotations["noderesource.dev/resources"] = doc if isinstance(doc, str) else json.dumps(doc)
    return sandbox


async def test_noderesource_annotation_names_the_init_container(workdir: Path) -> None:
    settings = make_settings(workdir, reconcile={"cgroup_writes": False})
    gpod = annotated(pod("gold"), {
        "initContainers": {"setup": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}},
        "containers": {"a": {"requests": {"cpu": "2000m"}, "limits": {"cpu": "2"}},
                       "b": {"limits": {"cpu": "2"}}}})
    async with running(settings, CONTAINERD_2_3_0) as r:
        setup = kubelet_container(gpod, "setup", 2000, 2000)
        reply = await r.conn.create_container(create(gpod, setup))
        assert reply is not None
        setup_cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert assignments(r.svc)[setup.id]["init"]  # known at its create
        await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=exited(setup)))
        a = kubelet_container(gpod, "a", 2000, 2000)
        reply = await r.conn.create_container(create(gpod, a))
        assert reply is not None and CPUSet.parse(reply.adjust.linux.resources.cpu.cpus) == setup_cpus
        await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=exited(a)))
        reply = await r.conn.create_container(create(gpod, kubelet_container(gpod, "b", 2000, 2000)))
        assert reply is not None  # "a" is an app container by the annotation: not reused
        assert CPUSet.parse(reply.adjust.linux.resources.cpu.cpus).isdisjoint(setup_cpus)


async def test_bad_noderesource_annotation_is_logged_and_the_values_inferred(workdir: Path) -> None:
    settings = make_settings(workdir, reconcile={"cgroup_writes": False})
    async with running(settings, CONTAINERD_2_3_0) as r:
        for i, doc in enumerate(["{not json", {"containers": ["app"]},
                                 {"containers": {"app": {"requests": {"cpu": "lots"}}}},
                                 {"containers": {"app": {"requests": {"cpu": "3"}, "limits": {"cpu": "3"}}}}]):
            gpod = annotated(pod(f"gold{i}"), doc)
            c = kubelet_container(gpod, "app", 1000, 1000)
            reply = await r.conn.create_container(create(gpod, c))  # never refused for it
            assert reply is not None
            assert len(CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)) == 1  # the cgroup values
            assert cpuset_updates(reply.update) == {}
        value = r.svc.metrics.registry.get_sample_value("nri_pinner_bad_input_total", {"source": "noderesource"})
        assert value == 4


def test_noderesource_values_and_errors_from_the_intent() -> None:
    from nri_pinner.service.core.intent import intent_from_nri

    gpod = annotated(pod("gold", "burstable"), {
        "initContainers": {"setup": {"requests": {"cpu": "250m"}}},
        "containers": {"app": {"requests": {"cpu": "1500m"}, "limits": {"cpu": 3}}}})
    i = intent_from_nri(gpod, kubelet_container(gpod, "app", 1500, 3000))
    assert (i.request_milli, i.limit_milli, i.source, i.role, i.init, i.note) == (1500, 3000, "noderesource",
                                                                                 "noderesource", False, "")
    i = intent_from_nri(gpod, kubelet_container(gpod, "setup", 250))
    assert (i.request_milli, i.init, i.role) == (250, True, "noderesource")
    i = intent_from_nri(gpod, kubelet_container(gpod, "app", 2000, 3000))  # resized since: the cgroup wins
    assert i.request_milli == 2000 and i.source == "cgroup" and "disagrees with the container's cpu.shares" in i.note
    bad = annotated(pod("bad", "burstable"), {"containers": {"app": {"requests": {"cpu": "-1"}}}})
    i = intent_from_nri(bad, kubelet_container(bad, "app", 500))
    assert i.request_milli == 500 and "requests.cpu: negative CPU quantity" in i.note
    i = intent_from_nri(annotated(pod("j", "burstable"), "[1]"), kubelet_container(pod("j"), "app", 500))
    assert "expected a JSON object" in i.note and i.request_milli == 500
