"""Pods with pod-level resources (KEP-2837, `spec.resources`) at the core: no container of one gets
exclusive CPUs or memory, as the kubelet of v1.34-v1.36 (its static CPU policy and Memory Manager skip
the pod: kubernetes#133279). Every message is what the kubelet model builds (tests/e2e/kubelet_pod.py,
each field from the kubelet's source) converted as containerd converts it (testkit/pod_builders.py
``nri_pod_from_cri`` / ``nri_container_from_cri``), through protobuf bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from core_harness import Edge, create, make_core, make_settings, updates_of

from nri_pinner.core import events as ev
from nri_pinner.core.effects import Park
from nri_pinner.core.quotas import CHECK_TIMER
from nri_pinner.core.reply_updates import view_update
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CreateReply, UpdatesReply
from testkit.pod_builders import nri_container_from_cri, nri_pod_from_cri, resize_request
from tests.e2e import kubelet_model as km
from tests.e2e import kubelet_pod as kp

GiB = 1 << 30
NODE = km.Node(memory_capacity=64 * GiB)
IMAGE = kp.Image("sha256:" + "0" * 64)
POD_4 = km.PodLevel(cpu_milli_request=4000, cpu_milli_limit=4000, memory_request=4 * GiB, memory_limit=4 * GiB)


def whole(cpus: int) -> km.ContainerResources:
    return km.ContainerResources(cpus * 1000, cpus * 1000, GiB, GiB)


def messages(pod: kp.Pod) -> tuple[api.PodSandbox, dict[str, api.Container]]:
    """The sandbox and each container as NRI carries them from the kubelet's requests."""
    sandbox = nri_pod_from_cri(kp.sandbox_config(pod, NODE), f"sb-{pod.name}")
    return sandbox, {c.name: nri_container_from_cri(kp.container_config(pod, c.name, NODE, IMAGE), sandbox,
                                                    f"{pod.name}-{c.name}")
                     for c in pod.init_containers + pod.containers}


def exclusive_ids(e: Edge) -> set[str]:
    return {cid for cid, a in e.assignments().items() if a["exclusive"]}


def test_guaranteed_pod_with_pod_level_resources_gets_no_exclusive_cpus() -> None:
    """spec.resources 4 CPUs / 4 GiB (Guaranteed); two containers without resources of their own (each
    is given the pod's limit as quota and shares) and one with its own whole 2 CPUs. The kubelet gives
    none of them exclusive CPUs; nri-pinner pinned each, 10 CPUs for a pod of 4."""
    pod = kp.Pod("plr", "default", "uid-plr", (kp.Container("a"), kp.Container("b"), kp.Container("own", whole(2))),
                 resources=POD_4)
    assert pod.qos is km.QOSClass.GUARANTEED
    sandbox, c = messages(pod)
    e = make_core()
    everything = e.pool
    for name in ("a", "b", "own"):  # the kubelet's order: create, start, then the next
        e.run(sandbox, c[name])
    assert exclusive_ids(e) == set()
    assert e.pool == everything
    rows = e.assignments()
    assert {rows[c[n].id]["cpus"] for n in ("a", "b", "own")} == {str(everything)}
    assert rows[c["own"].id]["pod_level_resources"] == "pod-cpu-limit-exceeded"


def test_the_first_container_looks_like_an_ordinary_pods_until_a_sibling_shows_the_pod() -> None:
    """Where the runtime cannot tell: the first container, given the pod's whole limit, is exactly a
    one-container Guaranteed pod of 4 CPUs (same sandbox resources, same container resources). It is
    pinned; the second one's create shows the pod (8 CPUs of limits in a pod of 4), and the first one
    goes to the shared pool then."""
    pod = kp.Pod("plr", "default", "uid-plr", (kp.Container("a"), kp.Container("b")), resources=POD_4)
    four = km.ContainerResources(4000, 4000, 4 * GiB, 4 * GiB)
    ordinary = kp.Pod("one", "default", "uid-one", (kp.Container("a", four),))
    sandbox, c = messages(pod)
    other_sandbox, other = messages(ordinary)
    assert sandbox.linux.pod_resources == other_sandbox.linux.pod_resources
    assert c["a"].linux.resources == other["a"].linux.resources

    e = make_core()
    everything = e.pool
    assert len(e.run(sandbox, c["a"])) == 4
    reply = e.handle(create(sandbox, c["b"])).reply
    assert isinstance(reply, CreateReply) and reply.cpus == str(everything)
    assert exclusive_ids(e) == set()
    # a has started, but its quota was removed: its update (the kubelet's quota back, with the shared
    # pool) rides on b's reply, which only an NRI update can carry (reply_updates.quota_back)
    assert updates_of(reply)[c["a"].id].cpus == str(everything)


def test_containers_with_their_own_limits_that_fit_cannot_be_told_without_the_annotation() -> None:
    """Two containers of 2 whole CPUs each in a pod of 4: the same requests as an ordinary pod's, so
    they are pinned (the kubelet pins none); the pod annotation says what the requests cannot."""
    spec = (kp.Container("x", whole(2)), kp.Container("y", whole(2)))
    pod = kp.Pod("fit", "default", "uid-fit", spec, resources=POD_4)
    sandbox, c = messages(pod)
    e = make_core()
    for name in ("x", "y"):
        e.run(sandbox, c[name])
    assert exclusive_ids(e) == {c["x"].id, c["y"].id}

    told = kp.Pod("told", "default", "uid-told", spec, resources=POD_4,
                  annotations={"nri-pinner.io/pod-level-resources": "true"})
    sandbox, c = messages(told)
    e = make_core()
    for name in ("x", "y"):
        e.run(sandbox, c[name])
    assert exclusive_ids(e) == set()


def test_a_request_below_its_limit_in_a_guaranteed_pod_shows_the_pod_at_once() -> None:
    """Only spec.resources make a Guaranteed pod of a container whose request is below its limit:
    its sibling with its own whole CPUs is not pinned either."""
    pod = kp.Pod("half", "default", "uid-half",
                 (kp.Container("low", km.ContainerResources(1000, 2000, GiB, GiB)), kp.Container("own", whole(2))),
                 resources=POD_4)
    assert pod.qos is km.QOSClass.GUARANTEED
    sandbox, c = messages(pod)
    e = make_core()
    for name in ("low", "own"):
        e.run(sandbox, c[name])
    assert exclusive_ids(e) == set()
    assert e.assignments()[c["own"].id]["pod_level_resources"] == "request-below-limit"


def test_an_ordinary_guaranteed_pod_with_an_init_container_is_pinned_as_before() -> None:
    """No pod-level resources: an init container as large as the pod and two app containers that
    fill it. The init container has stopped when the apps are created (containerd delivers NRI
    StopContainer from its exit handler, before the kubelet can see the exit), so nothing adds up
    past the sandbox's limit."""
    pod = kp.Pod("plain", "default", "uid-plain", (kp.Container("a", whole(2)), kp.Container("b", whole(2))),
                 init_containers=(kp.Container("init", whole(4)),))
    sandbox, c = messages(pod)
    e = make_core()
    e.run(sandbox, c["init"])
    e.handle(ev.StopContainer(c["init"].id))
    for name in ("a", "b"):
        e.run(sandbox, c[name])
    assert {c["a"].id, c["b"].id} <= exclusive_ids(e)


def test_synchronize_sees_the_pod_from_all_its_containers() -> None:
    """A restarted plugin: the runtime lists the pod's containers at once."""
    pod = kp.Pod("plr", "default", "uid-plr", (kp.Container("a"), kp.Container("b")), resources=POD_4)
    sandbox, c = messages(pod)
    running: Sequence[api.Container] = [_running(c["a"]), _running(c["b"])]
    e = make_core(synchronized=False)
    e.sync([sandbox], running)
    assert exclusive_ids(e) == set()


def test_synchronize_under_the_gate_keeps_the_guaranteed_equivalent_container_pinned() -> None:
    """PodLevelResourceManagers on, container scope (README "Pod-level resource managers"): a restarted
    plugin sees the pod from all its containers; "own" (2 whole CPUs, 1 GiB, its spec in
    noderesource.dev/resources) is pinned, "a" (nothing of its own) stays shared. Gate off: neither."""
    own = kp.Container("own", whole(2))
    spec = '{"containers": {"a": {}, "own": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", ' \
           '"memory": "1Gi"}}}}'
    pod = kp.Pod("plr", "default", "uid-plr", (kp.Container("a"), own), resources=POD_4,
                 annotations={"noderesource.dev/resources": spec})
    sandbox, c = messages(pod)
    for gate, pinned in ((True, {c["own"].id}), (False, set())):
        e = make_core(make_settings(topology_manager={"pod_level_resource_managers": gate}), synchronized=False)
        e.sync([sandbox], [_running(c["a"]), _running(c["own"])])
        assert exclusive_ids(e) == pinned, gate


def test_a_resize_keeps_a_pod_level_container_on_the_shared_pool() -> None:
    pod = kp.Pod("plr", "default", "uid-plr", (kp.Container("a"), kp.Container("b")), resources=POD_4)
    sandbox, c = messages(pod)
    e = make_core()
    for name in ("a", "b"):
        e.run(sandbox, c[name])
    e.handle(ev.UpdateContainer(resize_request(c["b"], sandbox, 2000)))
    e.settle()
    assert exclusive_ids(e) == set()


def passes(e: Edge, errors: dict[str, str] | None = None) -> None:
    """The passes the core wants, each written (those in ``errors`` failing); no other timer fired."""
    for _ in range(20):
        if e.in_flight:
            e.write(errors)
        elif due := [n for n in e.armed if n.startswith("settle")]:
            e.fire(due[0])
        else:
            return
    raise AssertionError("the passes never end")


def admitted_exclusive_then_shown(e: Edge, pod: kp.Pod) -> tuple[api.PodSandbox, dict[str, api.Container], CreateReply]:
    """The pod's first container created, started and pinned (quota -1 in its create's adjustment, its
    pod cgroup's quota removed by the pass its start waits for); then the second container's create,
    which shows the pod: its reply."""
    sandbox, c = messages(pod)
    first = e.handle(create(sandbox, c["a"])).reply
    assert isinstance(first, CreateReply) and first.cpu_quota == -1 and len(first.cpus.split(",")) == 4
    e.cgroups[c["a"].id] = e.core.node.desired(e.core.node.containers[c["a"].id])[0]
    e.handle(ev.StartContainer(c["a"].id))
    passes(e)
    assert e.pod_quotas == {pod.uid: 1}  # the pod cgroup's quota removed
    reply = e.handle(create(sandbox, c["b"])).reply
    assert isinstance(reply, CreateReply) and reply.cpus == str(e.pool) and exclusive_ids(e) == set()
    return sandbox, c, reply


def test_a_demoted_container_gets_the_kubelets_quota_back() -> None:
    """issue 44: the first container, pinned, runs with quota -1; the kubelet gave it limit x period
    (it never pinned it). When the second container shows the pod, the first goes to the shared pool
    with its own quota back: in the second create's reply (a pass writes only cpusets), and in every
    later update of it (containerd's stored spec holds our -1: runc would write it again), the
    over-budget fallback's too. The new container itself keeps the kubelet's (no adjustment)."""
    pod = kp.Pod("plr", "default", "uid-plr", (kp.Container("a"), kp.Container("b")), resources=POD_4)
    e = make_core()
    sandbox, c, reply = admitted_exclusive_then_shown(e, pod)
    kubelets = int(c["a"].linux.resources.cpu.quota.value)
    assert kubelets == 400_000  # the pod's 4 CPUs x 100 ms: getCPULimit gives it the pod's limit
    back = updates_of(reply)[c["a"].id]
    assert (back.cpus, back.cpu_quota) == (str(e.pool), kubelets)
    assert reply.cpu_quota is None
    e.settle()
    # a later cpuset-only update of it (a runtime record update): the quota again, never -1
    req = api.UpdateContainerRequest(pod=sandbox, container=c["a"])
    req.linux_resources.cpu.cpus = str(e.pool)
    update = e.handle(ev.UpdateContainer(req)).reply
    assert isinstance(update, UpdatesReply) and updates_of(update)[c["a"].id].cpu_quota == kubelets
    t = e.core.node.containers[c["a"].id]
    assert view_update(e.core.node.view(), t, True).cpu_quota == kubelets


def test_a_demoted_pods_cgroup_gets_the_kubelets_quota_back() -> None:
    """The kubelet, which never pinned the pod, keeps its cgroup's quota = the pod's CPU limit x period
    (ResourceConfigForPod; the sandbox's `linux.pod_resources` carry the same quota and period). A pass
    puts it back once the pod has no exclusive CPU left, and the pod is then the kubelet's again: no
    re-check removes or writes it."""
    pod = kp.Pod("plr", "default", "uid-plr", (kp.Container("a"), kp.Container("b")), resources=POD_4)
    e = make_core()
    sandbox, c, _ = admitted_exclusive_then_shown(e, pod)
    cpu = sandbox.linux.pod_resources.cpu
    assert (cpu.quota.value, cpu.period.value) == (400_000, 100_000)
    passes_before = len(e.history)
    e.settle()
    restores = [[(q.pod_key, q.cgroup, q.quota, q.period) for q in p.quotas]
                for p in e.history[passes_before:] if p.quotas]
    assert restores == [[(pod.uid, f"/kubepods/pod{pod.uid}", 400_000, 100_000)]]
    assert e.restored == {pod.uid: 400_000} and e.pod_quotas == {pod.uid: 1}  # removed once, never again
    e.handle(ev.StartContainer(c["b"].id))
    e.settle()
    assert len([p for p in e.history[passes_before:] if p.quotas]) == 1


def test_a_quota_not_put_back_is_retried_at_the_check_and_a_kubelet_resize_supersedes_it() -> None:
    """As a removal: a failed write is retried at the check (`reconcile.period_seconds`). A kubelet resize
    in the pod before the pass wrote the pod's new quota (doPodResizeAction): ours would be stale."""
    pod = kp.Pod("plr", "default", "uid-plr", (kp.Container("a"), kp.Container("b")), resources=POD_4)
    e = make_core(make_settings(reconcile={"period_seconds": 10.0, "cri_socket": "",
                                           "cgroup_root": "/nonexistent/cgroup"}))
    admitted_exclusive_then_shown(e, pod)
    passes(e, errors={pod.uid: "cannot write '400000 100000' to .../cpu.max: EBUSY"})
    assert e.restored == {} and e.armed.get(CHECK_TIMER) == 10.0
    e.fire(CHECK_TIMER)
    passes(e)
    assert e.restored == {pod.uid: 400_000}
    assert CHECK_TIMER not in e.armed  # put back: the kubelet's again, never looked at
    assert e.pod_quotas == {pod.uid: 1}

    # the same pod shown again, but the kubelet resizes it before the pass: its write is the newer
    e = make_core()
    sandbox, _, _ = admitted_exclusive_then_shown(e, pod)
    e.handle(ev.UpdatePodSandbox(api.UpdatePodSandboxRequest(pod=sandbox)))
    e.settle()
    assert e.restored == {} and e.pod_quotas == {pod.uid: 1}


def test_a_demoted_pod_without_a_cpu_limit_is_left_alone() -> None:
    """The kubelet's `cpuCFSQuota: false`: no quota in the sandbox's resources, none in the pod cgroup
    (ResourceConfigForPod with enforceCPULimits false), none in the containers': nothing to put back."""
    pod = kp.Pod("plr", "default", "uid-plr", (kp.Container("a"), kp.Container("b")), resources=POD_4)
    sandbox, c = messages(pod)
    sandbox.linux.pod_resources.cpu.ClearField("quota")
    for name in ("a", "b"):
        c[name].linux.resources.cpu.ClearField("quota")
    e = make_core()
    e.run(sandbox, c["a"])
    assert exclusive_ids(e) == {c["a"].id} and e.pod_quotas == {pod.uid: 1}
    passes_before = len(e.history)
    reply = e.handle(create(sandbox, c["b"])).reply
    assert isinstance(reply, CreateReply) and exclusive_ids(e) == set()
    assert c["a"].id not in updates_of(reply)  # no quota of its own to put back: a pass widens its cpuset
    e.settle()
    assert [p.quotas for p in e.history[passes_before:] if p.quotas] == []


def _running(c: api.Container) -> api.Container:
    out = api.Container()
    out.CopyFrom(c)
    out.state = api.CONTAINER_RUNNING
    return out


def _demoted_by_a_siblings_reply(probe_first: bool) -> tuple[Edge, api.Container, str]:
    """The first container of a pod-level pod pinned and started, then moved to the shared pool by its
    sibling's create, whose reply carries its update (``probe_first``: a drift check probed just before)."""
    pod = kp.Pod("plr", "default", "uid-plr", (kp.Container("a"), kp.Container("b")), resources=POD_4)
    sandbox, c = messages(pod)
    e = make_core()
    pinned = e.run(sandbox, c["a"])
    if probe_first:
        e.handle(ev.DriftCheck())
    reply = e.handle(create(sandbox, c["b"])).reply
    assert c["a"].id in updates_of(reply)
    return e, c["a"], str(pinned)


@pytest.mark.parametrize("probe_first", [True, False], ids=["reply-after-the-probe", "reply-before-the-probe"])
def test_a_container_updated_in_a_reply_is_no_drift_until_the_runtime_had_a_drift_period(probe_first: bool) -> None:
    """Issue 45, seen in the VM guest (containerd 2.1, 20261129-195900): the drift check read the demoted
    container's old exclusive CPU 0.5 s after the reply that moved it and "repaired" it — the runtime applies
    an update a reply carries in its own time. The read that may predate it is left alone; the read after a
    whole drift period is not (an update the runtime dropped is drift then)."""
    e, a, old = _demoted_by_a_siblings_reply(probe_first)
    stale = {a.id: CPUSet.parse(old)}
    if probe_first:  # the read of the probe before the reply, then a whole round the reply may still be in
        assert e.handle(ev.CpusetsRead(stale)).reply == []
    e.handle(ev.DriftCheck())
    assert e.handle(ev.CpusetsRead(stale)).reply == []
    e.handle(ev.DriftCheck())
    assert isinstance(e.handle(ev.CpusetsRead(stale)).reply, Park)  # still the old set: drift, repaired by a pass
