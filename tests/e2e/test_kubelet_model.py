"""The kubelet model (kubelet_model.py, kubelet_pod.py, kubelet_sync.py) against golden data worked out by
hand from the kubelet v1.32 source and against the kubelet's own unit-test vectors (tests/e2e/golden/, each
file says how it was derived), plus the arithmetic at its boundaries. Pure: no containerd, no root."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from . import kubelet_model as km
from . import kubelet_pod as kp
from . import kubelet_sync as ks

GOLDEN = Path(__file__).resolve().parent / "golden"
SCENARIOS = ("burstable_cgroupfs_v1.json", "guaranteed_init_sidecar_systemd_v2.json")
UPSTREAM: dict[str, Any] = json.loads((GOLDEN / "upstream_vectors.json").read_text())
NODE = km.Node(memory_capacity=1 << 30)
KUBELET_CONTAINER_ANNOTATIONS = {kp.CONTAINER_HASH, kp.CONTAINER_RESTART_COUNT, kp.CONTAINER_TERMINATION_MESSAGE_PATH,
                                 kp.CONTAINER_TERMINATION_MESSAGE_POLICY, kp.POD_TERMINATION_GRACE_PERIOD}


def _res(d: dict[str, int]) -> km.ContainerResources:
    return km.ContainerResources(**d)


def _container(d: dict[str, Any]) -> kp.Container:
    return kp.Container(d["name"], _res(d["resources"]), d["image"], tuple(d.get("command", ())),
                        restartable=d.get("restartable", False))


def _scenario(name: str) -> tuple[dict[str, Any], km.Node, kp.Image, kp.Pod]:
    g = json.loads((GOLDEN / name).read_text())
    n = g["node"]
    node = km.Node(**{**n, "hugepage_sizes": tuple(n["hugepage_sizes"]),
                      "thermal_throttle_cpus": tuple(n["thermal_throttle_cpus"])})
    p = g["pod"]
    pod = kp.Pod(p["name"], p["namespace"], p["uid"], tuple(_container(c) for c in p["containers"]),
                 tuple(_container(c) for c in p["init_containers"]), p["labels"], p["annotations"],
                 p["termination_grace_period"])
    return g, node, kp.Image(**g["image"]), pod


def _model_calls(g: dict[str, Any], pod: kp.Pod) -> list[ks.Call]:
    calls = ks.start_calls(pod)
    if "resize" in g:
        calls.append(ks.Call("UpdateContainerResources", g["resize"]["container"]))
    if "restart" in g:
        calls += ks.restart_calls(pod, g["restart"], 1)
    return calls + ks.stop_calls(pod, g["removal"]["running"], g["removal"]["instances"])


@pytest.mark.parametrize("name", SCENARIOS)
def test_requests_match_the_golden_data(name: str) -> None:
    g, node, image, pod = _scenario(name)
    assert pod.qos.value == g["qos"]
    model = _model_calls(g, pod)
    assert [(c.method, c.container) for c in model] == [(c["method"], c.get("container", "")) for c in g["calls"]]
    for call, want in zip(model, g["calls"], strict=True):
        where = f"{call.method} {call.container}"
        assert (call.wait, call.timeout, call.restart_count) == (
            want.get("wait", ""), want.get("timeout", 0), want.get("restart_count", 0)), where
        if call.method == "RunPodSandbox":
            assert kp.sandbox_config(pod, node) == want["request"]["config"]
        elif call.method == "CreateContainer":
            got = kp.container_config(pod, call.container, node, image, call.restart_count)
            assert got == want["request"]["config"], where
        elif call.method == "UpdateContainerResources":
            new = _res(g["resize"]["resources"])
            assert kp.resize_resources(pod, call.container, new, node) == want["request"]["linux"]
        else:
            assert "request" not in want, where


@pytest.mark.parametrize("case", UPSTREAM["calculate_linux_resources"], ids=lambda c: c["name"])
def test_calculate_linux_resources_matches_the_kubelets_own_tests(case: dict[str, Any]) -> None:
    node = km.Node(memory_capacity=1 << 30, cgroup_v2=case["cgroup_v2"],
                   single_process_oom_kill=case.get("single_process_oom_kill"))
    got = km.calculate_linux_resources(case["cpu_request"], case["cpu_limit"], case["memory_limit"], node)
    assert got == case["expected"]


@pytest.mark.parametrize("case", UPSTREAM["container_resources"], ids=lambda c: c["name"])
def test_container_resources_match_the_kubelets_own_tests(case: dict[str, Any]) -> None:
    got = km.container_linux_resources(_res(case["resources"]), km.QOSClass.BURSTABLE, NODE)
    fields = ("cpu_period", "cpu_quota", "cpu_shares", "memory_limit_in_bytes")  # what the upstream test compares
    assert {k: v for k, v in got.items() if k in fields} == case["expected"]


@pytest.mark.parametrize("case", UPSTREAM["sandbox_resources"], ids=lambda c: c["name"])
def test_sandbox_resources_match_the_kubelets_own_tests(case: dict[str, Any]) -> None:
    node = km.Node(memory_capacity=1 << 30, cgroup_v2=case["cgroup_v2"])
    assert km.pod_linux_resources([_res(c) for c in case["containers"]], node) == case["expected"]


@pytest.mark.parametrize("case", UPSTREAM["container_hash"], ids=lambda c: c["name"])
def test_container_hash_matches_the_kubelets_own_vector(case: dict[str, str]) -> None:
    assert kp.hash_container(case["name"], case["image"]) == case["expected"]


def test_shares_at_their_boundaries() -> None:
    # cm/helpers_linux.go:88-104: 0 and anything under 2 shares is 2; 256 CPUs is the 262144 ceiling
    milli = (0, 1, 2, 3, 250, 999, 1000, 1500, 256000, 256001, 10**6)
    assert [km.milli_cpu_to_shares(m) for m in milli] == [2, 2, 2, 3, 256, 1022, 1024, 1536, 262144, 262144, 262144]


def test_quota_at_its_boundaries() -> None:
    # kuberuntime/helpers_linux.go:40-60: 0 = no quota; at least 1 ms, reached at 10m
    quotas = [km.milli_cpu_to_quota(m) for m in (0, 1, 9, 10, 11, 250, 2000)]
    assert quotas == [0, 1000, 1000, 1000, 1100, 25000, 200000]


def test_qos_classes_count_init_containers() -> None:
    g = km.ContainerResources(1000, 1000, 1 << 26, 1 << 26)
    assert km.qos_class([km.ContainerResources(cpu_milli_limit=1000, memory_limit=1 << 26)]) is km.QOSClass.GUARANTEED
    assert km.qos_class([g, km.ContainerResources(cpu_milli_request=100)]) is km.QOSClass.BURSTABLE
    assert km.qos_class([km.ContainerResources(memory_limit=1 << 26)]) is km.QOSClass.BURSTABLE  # no cpu limit
    assert km.qos_class([km.ContainerResources()]) is km.QOSClass.BESTEFFORT
    pod = kp.Pod("p", "ns", "u", (kp.Container("app", g),), (kp.Container("init", km.ContainerResources(100, 200)),))
    assert pod.qos is km.QOSClass.BURSTABLE  # an init container's resources count (qos.go:113-116)
    with pytest.raises(ValueError, match="exceeds limit"):
        km.ContainerResources(cpu_milli_request=600, cpu_milli_limit=500)
    with pytest.raises(ValueError, match=">= 0"):
        km.ContainerResources(memory_limit=-1)


def test_oom_score_adj_of_burstable_containers() -> None:
    gib = 1 << 30
    assert km.oom_score_adj(km.QOSClass.BURSTABLE, 0, gib) == 999  # never the BestEffort 1000
    assert km.oom_score_adj(km.QOSClass.BURSTABLE, 1 << 26, gib) == 938
    assert km.oom_score_adj(km.QOSClass.BURSTABLE, gib, gib) == 3  # never below Guaranteed's 1000-997
    assert km.oom_score_adj(km.QOSClass.BURSTABLE, 0, gib, sidecar_floor_request=1 << 26) == 938
    assert km.oom_score_adj(km.QOSClass.GUARANTEED, 0, gib) == -997
    assert km.oom_score_adj(km.QOSClass.BESTEFFORT, 0, gib) == 1000


def test_cgroup_parents_for_both_drivers_escape_the_uid() -> None:
    uid = "12-34-56"
    assert km.cgroup_parent(km.QOSClass.GUARANTEED, uid) == "/kubepods/pod12-34-56"
    assert km.cgroup_parent(km.QOSClass.BESTEFFORT, uid) == "/kubepods/besteffort/pod12-34-56"
    assert km.cgroup_parent(km.QOSClass.BURSTABLE, uid, "systemd") == (
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34_56.slice")
    assert km.cgroup_parent(km.QOSClass.GUARANTEED, uid, "systemd") == "/kubepods.slice/kubepods-pod12_34_56.slice"
    for bad in ("a--b.slice", "-a.slice", "a/b.slice", "a.scope"):
        with pytest.raises(ValueError):
            km.expand_slice(bad)
    with pytest.raises(ValueError):
        km.cgroup_parent(km.QOSClass.GUARANTEED, uid, "runit")


def test_sandbox_quota_sums_the_limits_that_are_set() -> None:
    # PodLimits adds the limits that exist (component-helpers resource/helpers.go:276-293): unlike the pod
    # cgroup (cm/helpers_linux.go:136-147, :195-200), the CRI sandbox gets a quota despite an unlimited container
    limited, unlimited = km.ContainerResources(500, 1000, 0, 1 << 26), km.ContainerResources(500, 0, 0, 0)
    mixed = km.pod_linux_resources([limited, unlimited], NODE)
    assert mixed == {"cpu_period": 100000, "cpu_quota": 100000, "cpu_shares": 1024, "memory_limit_in_bytes": 1 << 26}


def test_sandbox_takes_the_larger_of_the_init_phase_and_the_running_pod() -> None:
    app, big_init = km.ContainerResources(1000, 1000), km.ContainerResources(3000, 3000)
    side = km.ContainerResources(500, 500)
    pod = km.PodContainers((app,), ((side, True), (big_init, False)))  # the init runs beside the sidecar
    assert km.sandbox_linux_resources(pod, NODE)["cpu_shares"] == km.milli_cpu_to_shares(3500)
    pod = km.PodContainers((app,), ((big_init, False), (side, True)))  # the sidecar starts after it
    assert km.sandbox_linux_resources(pod, NODE)["cpu_quota"] == km.milli_cpu_to_quota(3000)


def test_no_container_is_marked_as_an_init_container() -> None:
    """The kubelet writes the same label and annotation keys for init, sidecar and app containers
    (kuberuntime/labels.go:96-147): nothing tells them apart but the order of its calls."""
    _, node, image, pod = _scenario("guaranteed_init_sidecar_systemd_v2.json")
    configs = {c.name: kp.container_config(pod, c.name, node, image) for c in pod.init_containers + pod.containers}
    for name, cfg in configs.items():
        assert set(cfg["annotations"]) == KUBELET_CONTAINER_ANNOTATIONS, name
        assert set(cfg["labels"]) == {kp.POD_NAME_LABEL, kp.POD_NAMESPACE_LABEL, kp.POD_UID_LABEL,
                                      kp.CONTAINER_NAME_LABEL}, name
    assert "io.kubernetes.container.type" not in json.dumps(configs)


def test_removal_stops_apps_before_sidecars_in_reverse_order() -> None:
    c = kp.Container
    pod = kp.Pod("p", "ns", "u", (c("a"), c("b")), (c("s1", restartable=True), c("init"), c("s2", restartable=True)),
                 termination_grace_period=0)
    calls = ks.stop_calls(pod, ["s1", "b", "s2", "a"], ["s1", "init", "s2", "a", "b"])
    assert [(x.method, x.container) for x in calls if x.method == "StopContainer"] == [
        ("StopContainer", "a"), ("StopContainer", "b"), ("StopContainer", "s2"), ("StopContainer", "s1")]
    assert {x.timeout for x in calls if x.method == "StopContainer"} == {ks.MINIMUM_GRACE_PERIOD}
    assert [x.method for x in calls[4:]] == ["StopPodSandbox"] + ["RemoveContainer"] * 5 + ["RemovePodSandbox"]
    with pytest.raises(ValueError, match="no container"):
        ks.stop_calls(pod, ["x"], [])


def test_restarts_count_up_and_prune_old_init_instances() -> None:
    pod = kp.Pod("p", "ns", "u", (kp.Container("app"),), (kp.Container("init"),))
    calls = ks.restart_calls(pod, "init", 3, exited_instances=3)
    assert [(x.method, x.restart_count) for x in calls] == [
        ("RemoveContainer", 0), ("RemoveContainer", 0), ("CreateContainer", 3), ("StartContainer", 0)]
    assert calls[-1].wait == "exited"
    assert [x.method for x in ks.restart_calls(pod, "app", 1, exited_instances=2)] == [
        "CreateContainer", "StartContainer"]  # app containers' old instances go with the garbage collector
    cfg = kp.container_config(pod, "app", NODE, kp.Image("sha256:x"), 2)
    assert (cfg["metadata"]["attempt"], cfg["log_path"], cfg["annotations"][kp.CONTAINER_RESTART_COUNT]) == (
        2, "app/2.log", "2")
    with pytest.raises(ValueError):
        ks.restart_calls(pod, "app", 0)


def test_pod_level_resources_set_the_qos_class_and_the_limits_of_containers_without_their_own() -> None:
    """qos.go:97-110 (pod-level values alone), defaults.go:460-499 (a missing pod request is the
    containers' aggregate, else the pod's limit), getCPULimit / getMemoryLimit (:100-125)."""
    gib = 1 << 30
    limits_only = km.PodLevel(cpu_milli_limit=4000, memory_limit=4 * gib)
    bare = kp.Pod("p", "default", "u", (kp.Container("a"),), resources=limits_only)
    assert bare.qos is km.QOSClass.GUARANTEED  # requests default to the limits
    part = kp.Pod("p", "default", "u", (kp.Container("a", km.ContainerResources(1000, 1000, gib, gib)),
                                         kp.Container("b")), resources=limits_only)
    assert part.qos is km.QOSClass.BURSTABLE  # the pod's requests default to a's: 1 CPU, 1 GiB
    res = kp.container_config(bare, "a", NODE, kp.Image("sha256:0"))["linux"]["resources"]
    assert (res["cpu_shares"], res["cpu_quota"], res["memory_limit_in_bytes"]) == (4096, 400_000, 4 * gib)
    assert kp.sandbox_config(part, NODE)["linux"]["resources"]["cpu_shares"] == 1024  # the defaulted request
    with pytest.raises(ValueError, match="<= the pod-level limit"):
        kp.Pod("p", "default", "u", (kp.Container("a", km.ContainerResources(8000, 8000, gib, gib)),),
               resources=limits_only)
    with pytest.raises(NotImplementedError):
        kp.container_config(part, "b", NODE, kp.Image("sha256:0"))
