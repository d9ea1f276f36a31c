"""Pods with pod-level resources (KEP-2837): what the kubelet v1.32 sends and how nri-pinner reads it.

A container without its own CPU limit gets the pod-level limit as its quota (kubelet v1.32
kuberuntime/kuberuntime_container_linux.go:100-111 getCPULimit) and, without its own request, shares
from that limit (:256-262 calculateLinuxResources). The request below is built from those rules with
the kubelet's own arithmetic (tests/e2e/kubelet_model.py), not hand-typed numbers.
"""

from __future__ import annotations

from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.service.core.intent import intent_from_nri
from tests.e2e import kubelet_model as km

POD_LIMIT_MILLI = 2000
GUARANTEED_PARENT = "/kubepods.slice/kubepods-pod12_34.slice"


def _inherited(pod_annotations: dict[str, str]) -> tuple[api.PodSandbox, api.Container]:
    """A container with no CPU request or limit of its own in a Guaranteed pod limited to 2 CPUs."""
    pod = api.PodSandbox(id="sb", name="p", uid="12-34", namespace="default", annotations=pod_annotations)
    pod.linux.cgroup_parent = GUARANTEED_PARENT
    # the sandbox carries the pod's totals (kuberuntime_sandbox_linux.go:46-58)
    pod.linux.pod_resources.cpu.shares.value = km.milli_cpu_to_shares(POD_LIMIT_MILLI)
    pod.linux.pod_resources.cpu.quota.value = km.milli_cpu_to_quota(POD_LIMIT_MILLI)
    pod.linux.pod_resources.cpu.period.value = km.QUOTA_PERIOD
    ctr = api.Container(id="c1", pod_sandbox_id="sb", name="app")
    ctr.linux.resources.cpu.shares.value = km.milli_cpu_to_shares(POD_LIMIT_MILLI)  # request nil: from the limit
    ctr.linux.resources.cpu.quota.value = km.milli_cpu_to_quota(POD_LIMIT_MILLI)    # the pod-level limit
    ctr.linux.resources.cpu.period.value = km.QUOTA_PERIOD
    return (api.PodSandbox.FromString(pod.SerializeToString()),
            api.Container.FromString(ctr.SerializeToString()))


def test_a_container_inheriting_the_pod_limit_reads_as_requesting_it() -> None:
    # the documented limit (README "Pod-level resources"): the kubelet's static policy gives this
    # container no exclusive CPUs (policy_static.go:457-477 reads the container's own request)
    intent = intent_from_nri(*_inherited({}))
    assert (intent.request_milli, intent.limit_milli) == (POD_LIMIT_MILLI, POD_LIMIT_MILLI)
    assert intent.source == "cgroup"


def test_the_documented_annotation_keeps_it_in_the_shared_pool() -> None:
    intent = intent_from_nri(*_inherited({"nri-pinner.io/cpu.app": "0"}))
    assert intent.request_milli == 0
    assert intent.source == "annotation"
