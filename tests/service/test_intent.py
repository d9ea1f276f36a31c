"""Intent inference from real NRI protobuf messages, with the kubelet's conversions."""

import pytest

from nri_pinner.core.intent import (
    BESTEFFORT,
    BURSTABLE,
    CONTAINER_TYPE_OVERRIDE,
    GUARANTEED,
    UNMANAGED,
    IntentError,
    intent_from_nri,
    qos_from_cgroup_parent,
    quota_to_milli,
    shares_to_milli,
)
from nri_pinner.nri.gen import api_pb2 as api


def make(parent: str, shares: int | None, quota: int | None = None, period: int | None = 100000,
         pod_ann: dict[str, str] | None = None, ctr_ann: dict[str, str] | None = None,
         name: str = "app") -> tuple[api.PodSandbox, api.Container]:
    pod = api.PodSandbox(id="sb", name="p", uid="uid-1", namespace="default", annotations=pod_ann or {})
    pod.linux.cgroup_parent = parent
    ctr = api.Container(id="c1", pod_sandbox_id="sb", name=name, annotations=ctr_ann or {})
    cpu = ctr.linux.resources.cpu
    if shares is not None:
        cpu.shares.value = shares
    if quota is not None:
        cpu.quota.value = quota
    if period is not None:
        cpu.period.value = period
    # through real bytes, as the stub hands them over
    return (api.PodSandbox.FromString(pod.SerializeToString()),
            api.Container.FromString(ctr.SerializeToString()))


@pytest.mark.parametrize(("parent", "qos"), [
    ("/kubepods/pod1234", GUARANTEED),
    ("/kubepods/burstable/pod1234", BURSTABLE),
    ("/kubepods/besteffort/pod1234", BESTEFFORT),
    ("/kubepods.slice/kubepods-pod12_34.slice", GUARANTEED),
    ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice", BURSTABLE),
    ("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice", BESTEFFORT),
    ("/custom-root/kubepods/burstable/pod1", BURSTABLE),
    ("", UNMANAGED),
    ("/system.slice", UNMANAGED),
])
def test_qos_from_both_cgroup_driver_spellings(parent: str, qos: str) -> None:
    assert qos_from_cgroup_parent(parent) == qos


def test_kubelet_conversions_round_trip() -> None:
    # kubelet: shares = milli*1024/1000; we invert with rounding
    for milli in (100, 250, 1000, 1500, 2000, 64000):
        assert shares_to_milli(milli * 1024 // 1000) == milli
    assert shares_to_milli(2) == 0
    assert quota_to_milli(50000, 100000) == 500
    assert quota_to_milli(-1, 100000) == 0


def test_guaranteed_integer_container() -> None:
    i = intent_from_nri(*make("/kubepods/pod1", 2048, 200000))
    assert (i.qos, i.request_milli, i.limit_milli, i.source) == (GUARANTEED, 2000, 2000, "cgroup")


def test_guaranteed_without_quota_keeps_limit_equal_request() -> None:
    i = intent_from_nri(*make("/kubepods/pod1", 1024, None))
    assert (i.request_milli, i.limit_milli) == (1000, 1000)


def test_burstable_reads_limit_from_quota() -> None:
    i = intent_from_nri(*make("/kubepods/burstable/pod1", 256, 50000))
    assert (i.qos, i.request_milli, i.limit_milli) == (BURSTABLE, 250, 500)


def test_exact_annotation_overrides_inference() -> None:
    i = intent_from_nri(*make("/kubepods/pod1", 1536, 150000, pod_ann={"nri-pinner.io/cpu.app": "1500m/2"}))
    assert (i.request_milli, i.limit_milli, i.source) == (1500, 2000, "annotation")


def test_exclusive_annotation_for_plain_containerd() -> None:
    i = intent_from_nri(*make("", 2, None, ctr_ann={"nri-pinner.io/exclusive-cpus": "2"}))
    assert (i.qos, i.request_milli, i.limit_milli) == (GUARANTEED, 2000, 2000)
    i = intent_from_nri(*make("", 2, None, pod_ann={"nri-pinner.io/exclusive-cpus.app": "1"}))
    assert i.request_milli == 1000
    with pytest.raises(IntentError, match="positive integer"):
        intent_from_nri(*make("", 2, None, ctr_ann={"nri-pinner.io/exclusive-cpus": "two"}))


def test_init_and_sidecar_marks_come_from_pod_annotations() -> None:
    ann = {"nri-pinner.io/init-containers": "setup", "nri-pinner.io/sidecar-containers": "proxy"}
    assert intent_from_nri(*make("/kubepods/pod1", 1024, name="setup", pod_ann=ann)).init
    side = intent_from_nri(*make("/kubepods/pod1", 1024, name="proxy", pod_ann=ann))
    assert side.init and side.restartable
    app = intent_from_nri(*make("/kubepods/pod1", 1024, name="app", pod_ann=ann))
    assert not app.init and not app.restartable


def test_plain_containerd_container_type_override_marks_init() -> None:
    """A plain containerd client's override (README), not a kubelet field: the kubelet writes none."""
    init = intent_from_nri(*make("/kubepods/pod1", 1024, name="setup",
                                 ctr_ann={CONTAINER_TYPE_OVERRIDE: "init"}))
    assert init.init and not init.restartable and init.role == "container-type"
    app = intent_from_nri(*make("/kubepods/pod1", 1024, ctr_ann={CONTAINER_TYPE_OVERRIDE: "container"}))
    assert not app.init and app.role == "container-type"
    unmarked = intent_from_nri(*make("/kubepods/pod1", 1024, name="setup"))
    assert not unmarked.init and unmarked.role == ""  # as the kubelet sends it: decided when it stops
