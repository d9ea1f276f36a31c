"""Pods with pod-level resources (KEP-2837, `spec.resources`): what the kubelet of v1.34-v1.36 sends, and
that no container of such a pod gets exclusive CPUs (its CPU and Memory Managers skip the pod:
kubernetes#133279), through the real stub and the fake runtime's wire format (NRI v0.6.1 as in
containerd 1.7.24, v0.8.0 as in 2.1.9; both fill `linux.pod_resources` from the sandbox's CRI resources).

Every request is built by the kubelet model (tests/e2e/kubelet_model.py, kubelet_pod.py: each field from
the kubelet's source) and converted as containerd converts it (testkit/pod_builders.py), never hand-typed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from svc_harness import assignments, cpuset_updates, make_settings, running

from nri_pinner.core.intent import IntentError, intent_from_nri
from nri_pinner.nri.gen import api_pb2 as api
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_1_9, RuntimeProfile
from testkit.pod_builders import nri_container_from_cri, nri_pod_from_cri
from tests.e2e import kubelet_model as km
from tests.e2e import kubelet_pod as kp

GiB = 1 << 30
NODE = km.Node(memory_capacity=64 * GiB)
IMAGE = kp.Image("sha256:" + "1" * 64)
POD_2 = km.PodLevel(cpu_milli_request=2000, cpu_milli_limit=2000, memory_request=2 * GiB, memory_limit=2 * GiB)


def messages(pod: kp.Pod) -> tuple[api.PodSandbox, dict[str, api.Container]]:
    sandbox = nri_pod_from_cri(kp.sandbox_config(pod, NODE), f"sb-{pod.name}")
    return sandbox, {c.name: nri_container_from_cri(kp.container_config(pod, c.name, NODE, IMAGE), sandbox,
                                                    f"{pod.name}-{c.name}") for c in pod.containers}


def test_the_kubelet_gives_a_container_without_resources_the_pods_limit() -> None:
    """kuberuntime_container_linux.go:100-125 getCPULimit / getMemoryLimit, shares from that limit with
    no request of its own (:256-257); the sandbox carries spec.resources (kuberuntime_sandbox_linux.go:46-58)."""
    pod = kp.Pod("p", "default", "12-34", (kp.Container("app"),), resources=POD_2)
    res = kp.container_config(pod, "app", NODE, IMAGE)["linux"]["resources"]
    assert (res["cpu_shares"], res["cpu_quota"], res["memory_limit_in_bytes"]) == (2048, 200_000, 2 * GiB)
    assert kp.sandbox_config(pod, NODE)["linux"]["resources"]["cpu_quota"] == 200_000
    assert kp.sandbox_config(pod, NODE)["linux"]["cgroup_parent"] == "/kubepods/pod12-34"  # Guaranteed


def test_alone_such_a_container_reads_as_an_ordinary_one_of_the_pods_size() -> None:
    """Where the runtime cannot tell (README "Pod-level resources"): one container given the pod's limit."""
    sandbox, c = messages(kp.Pod("p", "default", "12-34", (kp.Container("app"),), resources=POD_2))
    intent = intent_from_nri(sandbox, c["app"])
    assert (intent.request_milli, intent.limit_milli, intent.pod_level) == (2000, 2000, "")


def test_the_pod_annotation_says_it() -> None:
    pod = kp.Pod("p", "default", "12-34", (kp.Container("app"),), resources=POD_2,
                 annotations={"nri-pinner.io/pod-level-resources": "true"})
    sandbox, c = messages(pod)
    intent = intent_from_nri(sandbox, c["app"])
    assert (intent.request_milli, intent.pod_level) == (0, "annotation")
    sandbox.annotations["nri-pinner.io/pod-level-resources"] = "yes"
    with pytest.raises(IntentError, match="only value"):
        intent_from_nri(sandbox, c["app"])


def test_the_resource_annotators_spec_says_it() -> None:
    """containers/nri-plugins' resource annotator copies each container's spec: one with no limit
    whose cgroup has a quota got the pod's (getCPULimit)."""
    pod = kp.Pod("p", "default", "12-34", (kp.Container("app"),), resources=POD_2,
                 annotations={"noderesource.dev/resources": '{"containers": {"app": {}}}'})
    sandbox, c = messages(pod)
    intent = intent_from_nri(sandbox, c["app"])
    assert (intent.request_milli, intent.pod_level, intent.note) == (0, "noderesource", "")


@pytest.mark.parametrize("profile", [CONTAINERD_1_7_24, CONTAINERD_2_1_9], ids=lambda p: p.label)
async def test_no_container_of_a_guaranteed_pod_level_pod_is_pinned(workdir: Path, profile: RuntimeProfile) -> None:
    """spec.resources 2 CPUs; "a" and "b" without resources of their own, "own" with its own whole
    CPU. The first looks like a one-container pod of 2 CPUs and is pinned; b's create shows the pod
    (4 CPUs of limits in a pod of 2): b is on the shared pool, and a goes back to it in b's reply."""
    own = kp.Container("own", km.ContainerResources(1000, 1000, GiB, GiB))
    pod = kp.Pod("plr", "default", "uid-plr", (kp.Container("a"), kp.Container("b"), own), resources=POD_2)
    sandbox, c = messages(pod)
    async with running(make_settings(workdir), profile) as r:
        shared = str(r.topology.online)
        first = await r.conn.create_container(api.CreateContainerRequest(pod=sandbox, container=c["a"]))
        assert first is not None and len(first.adjust.linux.resources.cpu.cpus.split(",")) == 2
        second = await r.conn.create_container(api.CreateContainerRequest(pod=sandbox, container=c["b"]))
        assert second is not None and second.adjust.linux.resources.cpu.cpus == shared
        assert cpuset_updates(second.update)[c["a"].id][0] == shared
        third = await r.conn.create_container(api.CreateContainerRequest(pod=sandbox, container=c["own"]))
        assert third is not None and third.adjust.linux.resources.cpu.cpus == shared
        rows = assignments(r.svc)
        assert not any(rows[c[n].id]["exclusive"] for n in ("a", "b", "own"))
        assert rows[c["own"].id]["pod_level_resources"] == "pod-cpu-limit-exceeded"
