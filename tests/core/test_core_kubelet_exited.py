"""Exited containers of kubelet pods at the core, with containers shaped as the kubelet sends them: no
`io.kubernetes.container.type` annotation (v1.32 pkg/kubelet/kuberuntime/labels.go writes none).
(Was tests/service/test_kubelet_exited.py, through the whole stack.)

The kubelet's rule (v1.32; core/roles.py): an exited container's exclusive CPUs stay its pod's
(PostStopContainer releases nothing, reconcileState skips terminated containers); a restarted
container gets the same CPUs (Allocate: "already present in state"); a regular init container's CPUs
are reused by its pod's next container (updateCPUsToReuse / allocateCPUs); they go back when the pod
goes (removeStaleState over activePods). Cgroup writes are off: pool changes travel in replies."""

from __future__ import annotations

import json

from core_harness import Edge, cpus_of, create, exited, kubelet_container, make_core, pod, updates_of

from nri_pinner.core import events as ev
from nri_pinner.core.effects import ListPodResources
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import UpdatesReply


def shared_desired(e: Edge) -> dict[str, CPUSet]:
    """Every running shared container's desired cpuset."""
    tr = e.core.node
    out = {}
    for t in tr.containers.values():
        a = tr.assignment(t)
        if not t.stopped and (a is None or not a.exclusive):
            out[t.container_id] = tr.desired(t)[0]
    return out


def stop(e: Edge, c: api.Container, code: int = 0) -> UpdatesReply:
    """StopContainer as containerd sends it for ``c`` exited with ``code``."""
    gone = exited(c, code)
    reply = e.handle(ev.StopContainer(gone.id, gone.exit_code)).reply
    assert isinstance(reply, UpdatesReply), reply
    return reply


def test_init_container_without_marker_keeps_its_cpus_for_the_app_container() -> None:
    """Fails on the old code: it took the unmarked init container for an app container and released
    its CPUs to the shared pool at its exit."""
    e = make_core(cgroup_writes=False)
    online = e.topology.online
    bpod, gpod = pod("burst", "burstable"), pod("gold")
    b = kubelet_container(bpod, "app", 100)
    init, app = kubelet_container(gpod, "setup", 2000, 2000), kubelet_container(gpod, "app", 2000, 2000)
    e.handle(create(bpod, b))
    init_cpus = cpus_of(e.handle(create(gpod, init)).reply)
    assert len(init_cpus) == 2

    assert stop(e, init).updates == ()  # nothing grows onto the pod's CPUs
    assert all(cpus.isdisjoint(init_cpus) for cpus in shared_desired(e).values())
    assert e.document()["pools"]["shared"] == str(online - init_cpus)
    assert e.entries()[init.id]["current"] == str(init_cpus)

    reply = e.handle(create(gpod, app)).reply
    assert cpus_of(reply) == init_cpus  # reused, as the kubelet does
    assert updates_of(reply) == {}
    assert all(cpus.isdisjoint(init_cpus) for cpus in shared_desired(e).values())
    rows = e.assignments()
    assert rows[init.id]["init"] and not rows[app.id]["init"]

    # the pod goes: StopPodSandbox gives everything back
    stop(e, app, 137)
    assert e.document()["pools"]["shared"] == str(online - init_cpus)
    e.handle(ev.StopPodSandbox(gpod))
    assert e.document()["pools"]["shared"] == str(online)
    assert shared_desired(e)[b.id] == online
    e.handle(ev.RemovePodSandbox(gpod))
    assert set(e.assignments()) == {b.id}


def test_a_restarted_container_gets_its_cpus_back_and_they_are_never_shared() -> None:
    e = make_core(cgroup_writes=False)
    online = e.topology.online
    bpod, gpod = pod("burst", "burstable"), pod("gold")
    e.handle(create(bpod, kubelet_container(bpod, "app", 100)))
    app = kubelet_container(gpod, "app", 2000, 2000)
    cpus = cpus_of(e.handle(create(gpod, app)).reply)

    assert stop(e, app, 1).updates == ()
    assert e.document()["pools"]["shared"] == str(online - cpus)

    again = kubelet_container(gpod, "app", 2000, 2000, cid="gold-app-restart-1")
    assert cpus_of(e.handle(create(gpod, again)).reply) == cpus  # kubelet: "already present"
    e.handle(ev.RemoveContainer(app.id))  # the GC removes the old instance
    assert e.assignments()[again.id]["cpus"] == str(cpus)
    assert e.document()["pools"]["shared"] == str(online - cpus)


def first_exits_then_second(e: Edge, gpod: api.PodSandbox, exit_code: int) -> tuple[CPUSet, CPUSet]:
    """Guaranteed "first" created, then stopped with `exit_code`, then "second" created: their CPUs."""
    first = kubelet_container(gpod, "first", 2000, 2000)
    first_cpus = cpus_of(e.handle(create(gpod, first)).reply)
    stop(e, first, exit_code)
    second = cpus_of(e.handle(create(gpod, kubelet_container(gpod, "second", 2000, 2000))).reply)
    return first_cpus, second


def test_an_app_container_taken_for_an_init_container_gets_new_cpus_when_it_comes_back() -> None:
    """Without PodResources or annotations, a container that exited 0 before its pod's next create is
    taken for an init container; if it is created again it was not, and must not share the CPUs a
    sibling reused."""
    e = make_core(cgroup_writes=False)
    gpod = pod("gold")
    first_cpus, second_cpus = first_exits_then_second(e, gpod, 0)
    assert second_cpus == first_cpus  # reused, as after an init container
    again = kubelet_container(gpod, "first", 2000, 2000, cid="gold-first-1")
    cpus = cpus_of(e.handle(create(gpod, again)).reply)
    assert len(cpus) == 2 and cpus.isdisjoint(second_cpus)
    assert e.document()["pools"]["exclusive"] == str(cpus | second_cpus)


def test_an_app_container_that_failed_is_not_reused() -> None:
    e = make_core(cgroup_writes=False)
    first_cpus, second_cpus = first_exits_then_second(e, pod("gold"), 2)
    # an init container that fails is retried, never followed: it was an app container
    assert second_cpus.isdisjoint(first_cpus)


def test_kept_cpus_survive_a_plugin_restart() -> None:
    gpod, bpod = pod("gold"), pod("burst", "burstable")
    init = kubelet_container(gpod, "setup", 2000, 2000)
    b = kubelet_container(bpod, "app", 100)
    e = make_core(cgroup_writes=False)
    e.handle(create(bpod, b))
    init_cpus = cpus_of(e.handle(create(gpod, init)).reply)
    stop(e, init)
    assert e.entries()[init.id]["stopped"]

    online = CPUSet.parse("0-11")
    listed = [exited(kubelet_container(gpod, "setup", 2000, 2000, cpus=str(init_cpus))),
              kubelet_container(bpod, "app", 100, cpus=str(online - init_cpus), mems="0,1")]
    again = make_core(cgroup_writes=False, prior=e.body(), synchronized=False)  # the restarted plugin
    assert again.sync([gpod, bpod], listed).updates == ()
    assert again.document()["pools"]["shared"] == str(online - init_cpus)
    reply = again.handle(create(gpod, kubelet_container(gpod, "app", 2000, 2000))).reply
    assert cpus_of(reply) == init_cpus
    again.handle(ev.StopPodSandbox(gpod))
    assert again.document()["pools"]["shared"] == str(online)


def test_a_recreated_sandbox_keeps_its_new_containers_when_the_old_one_is_removed() -> None:
    e = make_core(cgroup_writes=False)
    old_sb = pod("gold")
    first = kubelet_container(old_sb, "app", 2000, 2000)
    e.handle(create(old_sb, first))
    stop(e, first, 137)
    e.handle(ev.StopPodSandbox(old_sb))
    new_sb = pod("gold")
    new_sb.id = "sb-gold-2"
    again = kubelet_container(new_sb, "app", 2000, 2000, cid="gold-app-2")
    cpus = cpus_of(e.handle(create(new_sb, again)).reply)
    e.handle(ev.RemovePodSandbox(old_sb))
    assert e.document()["pools"]["exclusive"] == str(cpus)
    assert e.assignments()[again.id]["cpus"] == str(cpus)


# -- what tells init from app: PodResources, noderesource.dev/resources ------------------------------

def test_podresources_says_which_stopped_container_was_an_init_container() -> None:
    e = make_core(cgroup_writes=False)
    gpod = pod("gold")
    e.handle(ev.PodResourcesListed({}))  # the kubelet answers; its List does not have the pod yet
    setup, a = kubelet_container(gpod, "setup", 2000, 2000), kubelet_container(gpod, "a", 2000, 2000)
    setup_cpus = cpus_of(e.handle(create(gpod, setup)).reply)
    # the List lags the create: the stop decides nothing and asks for a new List
    gone = exited(setup, 0)
    stopped = e.handle(ev.StopContainer(gone.id, gone.exit_code))
    assert any(isinstance(x, ListPodResources) for x in stopped.effects)
    assert e.entries()[setup.id].get("role") != "podresources"
    e.handle(ev.PodResourcesListed({(gpod.namespace, gpod.name): frozenset({"a", "b"})}))  # app containers only
    a_cpus = cpus_of(e.handle(create(gpod, a)).reply)
    assert a_cpus == setup_cpus
    rows = e.assignments()
    assert rows[setup.id]["init"] and not rows[a.id]["init"]
    # "a" exits 0 before "b" is created: listed, so an app container; "b" does not reuse its CPUs
    stop(e, a)
    assert e.entries()[a.id]["role"] == "podresources"
    reply = e.handle(create(gpod, kubelet_container(gpod, "b", 2000, 2000))).reply
    assert cpus_of(reply).isdisjoint(a_cpus)


def annotated(sandbox: api.PodSandbox, doc: object) -> api.PodSandbox:
    sandbox.annotations["noderesource.dev/resources"] = doc if isinstance(doc, str) else json.dumps(doc)
    return sandbox


def test_noderesource_annotation_names_the_init_container() -> None:
    e = make_core(cgroup_writes=False)
    gpod = annotated(pod("gold"), {
        "initContainers": {"setup": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}},
        "containers": {"a": {"requests": {"cpu": "2000m"}, "limits": {"cpu": "2"}},
                       "b": {"limits": {"cpu": "2"}}}})
    setup = kubelet_container(gpod, "setup", 2000, 2000)
    setup_cpus = cpus_of(e.handle(create(gpod, setup)).reply)
    assert e.assignments()[setup.id]["init"]  # known at its create
    stop(e, setup)
    a = kubelet_container(gpod, "a", 2000, 2000)
    assert cpus_of(e.handle(create(gpod, a)).reply) == setup_cpus
    stop(e, a)
    reply = e.handle(create(gpod, kubelet_container(gpod, "b", 2000, 2000))).reply
    assert cpus_of(reply).isdisjoint(setup_cpus)  # "a" is an app container by the annotation: not reused


def test_bad_noderesource_annotation_is_logged_and_the_values_inferred() -> None:
    e = make_core(cgroup_writes=False)
    for i, doc in enumerate(["{not json", {"containers": ["app"]},
                             {"containers": {"app": {"requests": {"cpu": "lots"}}}},
                             {"containers": {"app": {"requests": {"cpu": "3"}, "limits": {"cpu": "3"}}}}]):
        gpod = annotated(pod(f"gold{i}"), doc)
        c = kubelet_container(gpod, "app", 1000, 1000)
        reply = e.handle(create(gpod, c)).reply  # never refused for it
        assert len(cpus_of(reply)) == 1  # the cgroup values
        assert updates_of(reply) == {}
    assert e.metric("nri_pinner_bad_input_total", {"source": "noderesource"}) == 4


def test_noderesource_values_and_errors_from_the_intent() -> None:
    from nri_pinner.core.intent import intent_from_nri

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
