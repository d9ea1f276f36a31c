"""The PodResources provider's hints: the kubelet device manager's expectations for devices a container holds.

Source: kubernetes/kubernetes pkg/kubelet/cm/devicemanager/topology_hints_test.go (``getCommonTestCases``,
the "already allocated to container" branch: after admission the kubelet re-derives hints from the
devices it allocated; read at commit 04791b4906602ffda5ccf9bc4c84d3329f1d7080, unchanged in v1.32).
Here the allocated devices come from a real ``ListPodResourcesResponse`` and the resource's other
devices from a real ``AllocatableResourcesResponse`` (serialized and parsed back), as the fetcher sees them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from svc_harness import DUAL_SOCKET, make_settings

from nri_pinner.edge.clients.podresources import view_of
from nri_pinner.edge.gen import podresources_pb2 as pr
from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.devicemanager.hints import Device
from nri_pinner.engine.devicemanager.podresources import (
    PodResourcesHintProvider,
    PodResourcesTable,
    PodResourcesView,
    devices_by_resource,
    without_reported,
)
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.engine.topologymanager.hints import HintRequest, TopologyHint, mask_of
from testkit.fake_kubelet import Devices, container_devices

NODES = (0, 1)
GPU = "vendor.com/gpu"


def h(nodes: list[int], preferred: bool) -> TopologyHint:
    return TopologyHint(mask_of(nodes), preferred)


def view(held: list[Devices], allocatable: list[Devices]) -> PodResourcesView:
    """Through the wire format: what the fetcher would build from the kubelet's answers."""
    listed = pr.ListPodResourcesResponse()
    listed.pod_resources.add(namespace="ns", name="p").containers.add(name="c", devices=container_devices(held))
    alloc = pr.AllocatableResourcesResponse(devices=container_devices(allocatable))
    return view_of(pr.ListPodResourcesResponse.FromString(listed.SerializeToString()),
                   pr.AllocatableResourcesResponse.FromString(alloc.SerializeToString()))


def provider(v: PodResourcesView) -> PodResourcesHintProvider:
    return PodResourcesHintProvider(NODES, PodResourcesTable(v, {"uid-p": ("ns", "p")}))


def hints_for(held: list[Devices], allocatable: list[Devices]) -> set[TopologyHint] | None:
    got = provider(view(held, allocatable)).hints(HintRequest("uid-p", "c", exclusive_cpus=1))
    if got is None:
        return None
    hints = got[GPU]
    return None if hints is None else set(hints)


FOUR: list[Devices] = [(GPU, ["Dev1"], [0]), (GPU, ["Dev2"], [1]), (GPU, ["Dev3"], [0]), (GPU, ["Dev4"], [1])]
CASES: list[tuple[str, list[Devices], list[Devices], set[TopologyHint] | None]] = [
    ("no alignment: no topology, no preference", [(GPU, ["Dev1"], None)],
     [(GPU, ["Dev1"], None), (GPU, ["Dev2"], None)], None),
    ("only one with alignment, that one held", [(GPU, ["Dev2"], [1])],
     [(GPU, ["Dev1"], None), (GPU, ["Dev2"], [1])], {h([1], True), h([0, 1], False)}),
    ("one device per socket, one held", [(GPU, ["Dev1"], [0])], [(GPU, ["Dev1"], [0]), (GPU, ["Dev2"], [1])],
     {h([0], True), h([0, 1], False)}),
    ("request for 2, one device per socket: both held (aligned as well as possible)",
     [(GPU, ["Dev1"], [0]), (GPU, ["Dev2"], [1])], [(GPU, ["Dev1"], [0]), (GPU, ["Dev2"], [1])],
     {h([0, 1], True)}),
    ("all already allocated to container, on one node", [(GPU, ["Dev1", "Dev2"], [0])],
     [(GPU, ["Dev1", "Dev2"], [0])], {h([0], True), h([0, 1], False)}),
    ("2 per socket, 2 held on one node (aligned)", [(GPU, ["Dev1", "Dev3"], [0])], FOUR,
     {h([0], True), h([0, 1], False)}),
    ("2 per socket, 2 held across nodes (unaligned: forced cross-NUMA, not preferred)",
     [(GPU, ["Dev3"], [0]), (GPU, ["Dev4"], [1])], FOUR, {h([0, 1], False)}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_kubelet_device_manager_cases(case: tuple[str, list[Devices], list[Devices], set[TopologyHint] | None]) -> None:
    _, held, allocatable, expected = case
    assert hints_for(held, allocatable) == expected


def test_a_device_on_two_nodes_and_negative_node_ids() -> None:
    both = devices_by_resource([(GPU, ["a"], [0, 1]), (GPU, ["b"], [-1]), (GPU, ["a"], [1])])
    assert both == {GPU: (Device("a", frozenset({0, 1})), Device("b", None))}  # first listing wins
    # the kubelet counts a device for every mask touching one of its nodes
    assert hints_for([(GPU, ["a"], [0, 1])], [(GPU, ["a"], [0, 1])]) == {h([0], True), h([1], True),
                                                                         h([0, 1], False)}


def test_unknown_pod_or_container_and_no_devices_give_no_preference() -> None:
    v = view([], [(GPU, ["Dev1"], [0])])
    p = provider(v)
    assert p.hints(HintRequest("uid-p", "c")) is None  # listed, holds nothing
    assert p.hints(HintRequest("uid-p", "other")) is None
    assert p.hints(HintRequest("uid-q", "c")) is None


def test_pod_scope_takes_every_container_of_the_pod() -> None:
    listed = pr.ListPodResourcesResponse()
    p = listed.pod_resources.add(namespace="ns", name="p")
    p.containers.add(name="a", devices=container_devices([(GPU, ["Dev1"], [0])]))
    p.containers.add(name="b", devices=container_devices([(GPU, ["Dev2"], [1])]))
    v = view_of(listed, pr.AllocatableResourcesResponse(devices=container_devices(FOUR)))
    prov = provider(v)
    single = prov.hints(HintRequest("uid-p", "a", exclusive_cpus=1))
    assert single is not None and set(single[GPU] or ()) == {h([0], True), h([0, 1], False)}
    whole = prov.hints(HintRequest("uid-p", None, exclusive_cpus=2))  # container None = pod scope
    assert whole is not None and set(whole[GPU] or ()) == {h([0, 1], False)}


def test_sysfs_devices_podresources_reports_are_not_counted_twice() -> None:
    reported = {"nvidia.com/gpu": [Device("GPU-1", frozenset({1}))], "intel.com/sriov": [Device("0000:18:02.1")]}
    sysfs = {
        "nvidia.com/gpu": [Device("c195:1", frozenset({1}))],  # CDI class = the plugin's resource name
        "nvidia": [Device("c195:0", frozenset({0}))],  # named after its driver: vendor of nvidia.com/gpu
        "intel_com_sriov": [Device("vfio:12", frozenset({0}))],  # PCIDEVICE_INTEL_COM_SRIOV spelling
        "nvme": [Device("b259:0", frozenset({1}))],  # no device plugin hands it out: sysfs keeps it
        "other": [Device("0000:18:02.1", frozenset({0})), Device("x", frozenset({0}))],  # same id dropped
    }
    assert without_reported(sysfs, reported) == {"nvme": [Device("b259:0", frozenset({1}))],
                                                  "other": [Device("x", frozenset({0}))]}
    assert without_reported(sysfs, {}) == sysfs  # nothing reported (no kubelet, not listed): sysfs as is


def test_single_numa_node_rejection_names_the_provider(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, sysfs=DUAL_SOCKET, topology_manager={"policy": "single-numa-node"},
                             hints={"providers": ["cpu", "podresources"]})
    topology = discover(settings.sysfs_root)
    v = view([(GPU, ["Dev1"], [0]), (GPU, ["Dev2"], [1])], [(GPU, ["Dev1"], [0]), (GPU, ["Dev2"], [1])])
    table = PodResourcesTable(v, {"uid-p": ("ns", "p")})
    engine = Engine.from_settings(settings, topology, [PodResourcesHintProvider(topology.numa_nodes, table)])
    _, d = engine.admit(engine.initial_state(), AdmissionRequest("uid-p", "c", "guaranteed", 2000, 2000))
    assert not d.admitted and d.reason == "TopologyAffinityError"
    assert "cannot be satisfied: podresources" in d.message
    assert d.blamed[0].startswith("podresources")
    assert d.provider_hints["podresources"] == {GPU: "{0,1}"}

    one = PodResourcesTable(view([(GPU, ["Dev2"], [1])], [(GPU, ["Dev1"], [0]), (GPU, ["Dev2"], [1])]),
                            {"uid-p": ("ns", "p")})
    engine = Engine.from_settings(settings, topology, [PodResourcesHintProvider(topology.numa_nodes, one)])
    _, d = engine.admit(engine.initial_state(), AdmissionRequest("uid-p", "c", "guaranteed", 2000, 2000))
    assert d.admitted and d.cpus & topology.numa_cpus[1] == d.cpus and d.mems == (1,)


def test_the_messages_carry_the_kubelets_field_numbers() -> None:
    """Hand-encoded protobuf bytes (tag = field << 3 | wire type) for the fields the provider reads."""
    listed = pr.ListPodResourcesResponse()
    p = listed.pod_resources.add(name="p", namespace="n")  # PodResources: name 1, namespace 2, containers 3
    p.containers.add(name="c", devices=container_devices([("r", ["d"], [1])]))
    numa = b"\x0a\x02\x08\x01"  # TopologyInfo.nodes 1 -> NUMANode.ID 1 = 1
    device = b"\x0a\x01r" + b"\x12\x01d" + b"\x1a\x04" + numa  # resource_name 1, device_ids 2, topology 3
    container = b"\x0a\x01c" + b"\x12" + bytes([len(device)]) + device  # name 1, devices 2
    pod = b"\x0a\x01p\x12\x01n" + b"\x1a" + bytes([len(container)]) + container
    assert listed.SerializeToString() == b"\x0a" + bytes([len(pod)]) + pod  # pod_resources 1
    alloc = pr.AllocatableResourcesResponse(devices=container_devices([("r", ["d"], [1])]), cpu_ids=[3])
    packed_cpus = b"\x12\x01\x03"  # cpu_ids 2, packed
    assert alloc.SerializeToString() == b"\x0a" + bytes([len(device)]) + device + packed_cpus  # devices 1
    assert pr.ContainerResources.DESCRIPTOR.fields_by_name["dynamic_resources"].number == 5


def test_config_check_and_simulate_with_the_provider(tmp_path: Path) -> None:
    from nri_pinner.cli.simulate import ScenarioError, load_engine
    from nri_pinner.config.validate import check_text

    text = f'sysfs_root = "{DUAL_SOCKET}"\n[hints]\nproviders = ["cpu", "devices", "podresources"]\n'
    assert check_text(text, "<t>").hints.providers == ("cpu", "devices", "podresources")  # host check passes
    with pytest.raises(ScenarioError, match="'podresources' is not implemented in simulate"):
        load_engine({"config": {"hints": {"providers": ["cpu", "podresources"]}}}, str(DUAL_SOCKET))
