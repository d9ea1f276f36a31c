"""No CFS quota on exclusive containers and their pods (core/quotas.py; README "Configuration reference":
`cpu_manager.disable_cpu_quota_with_exclusive_cpus`), at the core: what the create's adjustment and the
updates say, and which pod cgroups the passes write, when again, and never.

The kubelet's rules these follow (v1.33+, DisableCPUQuotaWithExclusiveCPUs): a container holding exclusive
CPUs gets CpuQuota -1 at its create and every update; its pod cgroup is created without a quota; the pod
cgroup is written again only by an in-place resize (before the containers' updates)."""

from __future__ import annotations

from core_harness import (
    PERIOD,
    Edge,
    container,
    create,
    make_core,
    make_settings,
    park_token,
    pod,
    resize,
    timers,
    updates_of,
)

from nri_pinner.core import events as ev
from nri_pinner.core.quotas import CHECK_TIMER, RECHECK_SECONDS, RESIZE_TIMER, pod_cgroup
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CreateReply, UpdatesReply
from nri_pinner.nri.stub.replies import create_response, response

BPOD, GPOD, PLAIN = pod("burst", "burstable"), pod("gold"), pod("plain", "plain")
B = container(BPOD, "app", 500, 1000)  # Burstable, a quota: shared, keeps it
G = container(GPOD, "app", 2000, 2000)  # Guaranteed, 2 CPUs: exclusive
F = container(GPOD, "frac", 500, 500)  # the same pod's fractional container: shared, keeps its quota


def created(e: Edge, sandbox: api.PodSandbox, c: api.Container) -> CreateReply:
    reply = e.handle(create(sandbox, c)).reply
    assert isinstance(reply, CreateReply), reply
    return reply


def settle_once(e: Edge) -> None:
    """Fire the armed settle timers (the core acts on the one it armed last): its pass is then in flight."""
    for name in [n for n in e.armed if n.startswith("settle")]:
        e.fire(name)


def quota_passes(e: Edge) -> list[list[str]]:
    """The pod keys of each pass the core dispatched that wrote a pod quota."""
    return [[q.pod_key for q in p.quotas] for p in e.history if p.quotas]


def update_reply(e: Edge, event: ev.UpdateContainer) -> UpdatesReply:
    out: object = e.handle(event).reply
    if not isinstance(out, UpdatesReply):
        token = park_token(out)
        e.settle()
        out = e.resolves[token]
    assert isinstance(out, UpdatesReply), out
    return out


def cpuset_only(sandbox: api.PodSandbox, c: api.Container, cpus: str) -> ev.UpdateContainer:
    """A CRI update with only the cpuset (ours coming back, a record update): containerd still sends
    shares/quota/period, each 0 (FromCRILinuxResources)."""
    req = api.UpdateContainerRequest(pod=sandbox, container=c)
    cpu = req.linux_resources.cpu
    cpu.shares.value, cpu.quota.value, cpu.period.value, cpu.cpus = 0, 0, 0, cpus
    return ev.UpdateContainer(req)


def test_an_exclusive_create_has_no_quota_and_shared_ones_keep_theirs() -> None:
    e = make_core()
    g = created(e, GPOD, G)
    assert g.cpu_quota == -1 and len(CPUSet.parse(g.cpus)) == 2
    # as the runtime reads it: the adjustment's OptionalInt64 is present and -1
    wire = api.CreateContainerResponse.FromString(create_response(g).SerializeToString())
    assert wire.adjust.linux.resources.cpu.HasField("quota") and wire.adjust.linux.resources.cpu.quota.value == -1
    for sandbox, c in ((BPOD, B), (GPOD, F)):
        reply = created(e, sandbox, c)
        assert reply.cpu_quota is None  # the kubelet's 100000 / 50000 stays
        assert not create_response(reply).adjust.linux.resources.cpu.HasField("quota")


def test_no_quota_to_remove_when_the_kubelet_sets_none() -> None:
    """The kubelet's cpuCFSQuota: false sends no quota at all (calculateLinuxResources): nothing to remove."""
    e = make_core()
    unlimited = container(GPOD, "free", 2000)  # Guaranteed by its pod's cgroup parent; no quota sent
    assert not unlimited.linux.resources.cpu.HasField("quota")
    reply = created(e, GPOD, unlimited)
    assert len(CPUSet.parse(reply.cpus)) == 2 and reply.cpu_quota is None


def test_the_setting_off_leaves_every_quota_and_every_pod_alone() -> None:
    e = make_core(make_settings(cpu_manager={"reserved_cpus": "0", "disable_cpu_quota_with_exclusive_cpus": False}))
    assert created(e, GPOD, G).cpu_quota is None
    e.handle(ev.StartContainer(G.id))
    e.settle()
    assert update_reply(e, resize(GPOD, G, 4000)).updates[0].cpu_quota is None
    e.settle()
    assert quota_passes(e) == []


def test_every_update_of_an_exclusive_container_removes_the_quota_and_to_shared_gives_it_back() -> None:
    e = make_core()
    e.run(GPOD, G)
    mine = e.core.node.desired(e.core.node.containers[G.id])[0]
    # our own cpuset-only update coming back (a record update): the runtime's stored quota stays -1
    assert updates_of(update_reply(e, cpuset_only(GPOD, G, str(mine))))[G.id].cpu_quota == -1
    # a grow: the kubelet's request carries 400000; the reply says -1
    grown = updates_of(update_reply(e, resize(GPOD, G, 4000)))[G.id]
    assert len(CPUSet.parse(grown.cpus)) == 4 and grown.cpu_quota == -1
    # to shared (fractional): the reply leaves the request's quota, the kubelet's 1500m x period
    event = resize(GPOD, G, 1500)
    assert event.req.linux_resources.cpu.quota.value == 1500 * PERIOD // 1000
    back = updates_of(update_reply(e, event))[G.id]
    assert back.cpus == str(e.pool) and back.cpu_quota is None
    # on the wire: the container's update has no quota field, so containerd keeps the request's 150000
    wire = response(UpdatesReply((back,)), api.UpdateContainerResponse)
    assert not wire.update[0].linux.resources.cpu.HasField("quota")
    assert e.core.node.containers[G.id].cfs_quota == 150000
    # and back to exclusive: -1 again
    assert updates_of(update_reply(e, resize(GPOD, G, 2000)))[G.id].cpu_quota == -1


def test_a_refused_resize_keeps_the_quota_the_container_has() -> None:
    e = make_core()
    e.run(GPOD, G)
    out = e.handle(resize(GPOD, G, 24_000)).reply  # twice the node: refused, runc update never runs
    assert not isinstance(out, UpdatesReply)
    assert e.core.node.containers[G.id].cfs_quota == 200000


def test_the_pod_of_an_exclusive_container_is_written_once_and_a_shared_pod_never() -> None:
    e = make_core()
    e.run(BPOD, B)
    assert quota_passes(e) == []
    e.handle(create(GPOD, G))
    token = park_token(e.handle(ev.StartContainer(G.id)).reply)
    [p] = e.in_flight
    assert [(q.pod_key, q.cgroup, q.name) for q in p.quotas] == [(GPOD.uid, f"/kubepods/pod{GPOD.uid}", "default/gold")]
    e.write()
    assert token in e.resolves  # the start was answered by the pass that also removed the pod's quota
    e.run(GPOD, F)  # the same pod's shared container: the pod is known to hold no quota, not written again
    e.settle()
    assert quota_passes(e) == [[GPOD.uid]] and e.pod_quotas == {GPOD.uid: 1}


def test_a_pod_outside_kubepods_has_no_pod_cgroup_to_write() -> None:
    e = make_core()
    e.run(PLAIN, container(PLAIN, "app", 2000, 2000))
    assert quota_passes(e) == []


def test_a_kubelet_resize_in_the_pod_has_its_quota_removed_again_now_and_a_second_later() -> None:
    """doPodResizeAction writes the pod cgroup's quota before the containers' updates (once the cgroup
    holds -1, every new quota is larger), and after them when it shrinks from a larger one."""
    e = make_core()
    e.run(GPOD, G)
    e.run(GPOD, F)
    assert e.pod_quotas == {GPOD.uid: 1}
    out = e.handle(resize(GPOD, F, 800))  # the shared sibling's resize: the pod's quota was rewritten
    assert (RESIZE_TIMER, RECHECK_SECONDS) in timers(out)
    e.settle()
    assert e.pod_quotas == {GPOD.uid: 3}  # at once, and at the re-check
    e.handle(ev.UpdatePodSandbox(api.UpdatePodSandboxRequest(pod=GPOD)))
    e.settle()
    assert e.pod_quotas == {GPOD.uid: 5}
    # resized to shared: no exclusive CPU left in the pod, whose quota the kubelet wrote back; left alone
    update_reply(e, resize(GPOD, G, 1500))
    e.settle()
    assert e.pod_quotas == {GPOD.uid: 5}


def test_a_write_that_failed_is_retried_at_the_check_and_the_check_verifies_every_pod() -> None:
    e = make_core(make_settings(reconcile={"period_seconds": 10.0, "cri_socket": "",
                                           "cgroup_root": "/nonexistent/cgroup"}))
    e.handle(create(GPOD, G))
    e.handle(ev.StartContainer(G.id))
    e.write(errors={GPOD.uid: "cannot read /sys/fs/cgroup/cpu/kubepods/podx/cpu.cfs_quota_us: ENOENT"})
    assert e.armed.get(CHECK_TIMER) == 10.0 and e.pod_quotas == {}
    e.handle(create(BPOD, B))  # another change: no pass for it retries the pod (the check does)
    e.handle(ev.StartContainer(B.id))
    settle_once(e)
    assert not e.in_flight and quota_passes(e) == [[GPOD.uid]]
    e.fire(CHECK_TIMER)
    settle_once(e)
    e.write()
    assert e.pod_quotas == {GPOD.uid: 1} and e.armed.get(CHECK_TIMER) == 10.0
    e.fire(CHECK_TIMER)  # verifies the pod again (the writer reads first and writes only a quota it finds)
    settle_once(e)
    assert [q.pod_key for q in e.in_flight[0].quotas] == [GPOD.uid]


def test_a_reconnect_reads_every_exclusive_pod_again() -> None:
    e = make_core()
    e.run(GPOD, G)
    g = container(GPOD, "app", 2000, 2000, cpus=str(e.core.node.desired(e.core.node.containers[G.id])[0]))
    g.linux.resources.cpu.quota.value = -1  # what the runtime stored from our adjustment
    e.handle(ev.ConnectionClosed())
    e.sync([GPOD], [g])
    assert e.pod_quotas == {GPOD.uid: 2}
    assert e.core.node.containers[G.id].cfs_quota == -1
    # an update of the adopted container still says -1
    mine = e.core.node.desired(e.core.node.containers[G.id])[0]
    assert updates_of(update_reply(e, cpuset_only(GPOD, g, str(mine))))[G.id].cpu_quota == -1


def test_cgroup_writes_off_still_remove_the_containers_quota() -> None:
    e = make_core(cgroup_writes=False)
    assert created(e, GPOD, G).cpu_quota == -1
    assert e.history == []


def test_pod_cgroups_are_only_what_the_kubelet_names_pods() -> None:
    uid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    assert pod_cgroup(f"/kubepods/pod{uid}/abc") == f"/kubepods/pod{uid}"
    assert pod_cgroup(f"/kubepods/burstable/pod{uid}/abc") == f"/kubepods/burstable/pod{uid}"
    slice_name = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    assert pod_cgroup(f"{slice_name}:cri-containerd:abc") == slice_name
    assert pod_cgroup(f"kubepods-pod{uid.replace('-', '_')}.slice:cri-containerd:abc") is not None
    for other in ("/default/abc", "/kubepods/abc", "/plain/pod1/abc", "system.slice:docker:abc", "", "abc",
                  "kubepods.slice:cri-containerd:abc", "/kubepods/burstable/abc", "/kubepods/../../x/pod1/abc",
                  "kubepods-pod1.slice/..:cri-containerd:abc"):
        assert pod_cgroup(other) is None, other
