"""Device hints: the kubelet v1.32 device manager's expectations, ported.

Source: kubernetes/kubernetes pkg/kubelet/cm/devicemanager/topology_hints_test.go
(``getCommonTestCases`` and ``TestTopologyAlignedAllocation``, read at commit 04791b4906602ffda5ccf9bc4c84d3329f1d7080;
the rules are unchanged in v1.32). NUMA nodes are {0, 1} as in the kubelet's tests.
"""

from __future__ import annotations

import pytest

from nri_pinner.engine.devicemanager.hints import (
    Device,
    DeviceHintProvider,
    ResourceDevices,
    device_hints,
    devices_to_allocate,
    filter_by_affinity,
    resource_hints,
)
from nri_pinner.engine.topologymanager.hints import TopologyHint, mask_of

NODES = (0, 1)


def dev(i: str, numa: int | None = None) -> Device:
    return Device(i, None if numa is None else frozenset({numa}))


def h(nodes: list[int], preferred: bool) -> TopologyHint:
    return TopologyHint(mask_of(nodes), preferred)


def as_set(hints: object) -> set[TopologyHint] | None:
    return None if hints is None else set(hints)  # type: ignore[call-overload]


FOUR = (dev("Dev1", 0), dev("Dev2", 1), dev("Dev3", 0), dev("Dev4", 1))

# (description, devices, allocated elsewhere, allocated to this container, request, expected)
CASES: list[tuple[str, tuple[Device, ...], set[str], set[str], int, set[TopologyHint] | None]] = [
    ("Single Request, no alignment", (dev("Dev1"), dev("Dev2")), set(), set(), 1, None),
    ("Single Request, only one with alignment", (dev("Dev1"), dev("Dev2", 1)), set(), set(), 1,
     {h([1], True), h([0, 1], False)}),
    ("Single Request, one device per socket", (dev("Dev1", 0), dev("Dev2", 1)), set(), set(), 1,
     {h([0], True), h([1], True), h([0, 1], False)}),
    ("Request for 2, one device per socket", (dev("Dev1", 0), dev("Dev2", 1)), set(), set(), 2,
     {h([0, 1], True)}),
    ("Request for 2, 2 devices per socket", FOUR, set(), set(), 2,
     {h([0], True), h([1], True), h([0, 1], False)}),
    ("Request for 2, optimal on 1 NUMA node, forced cross-NUMA", FOUR, {"Dev1", "Dev2"}, set(), 2,
     {h([0, 1], False)}),
    ("Single device type, more requested than available",
     (dev("Dev1", 0), dev("Dev2", 0), dev("Dev3", 1), dev("Dev4", 1)), set(), set(), 6, set()),
    ("Single device type, all already allocated to container", (dev("Dev1", 0), dev("Dev2", 0)),
     set(), {"Dev1", "Dev2"}, 2, {h([0], True), h([0, 1], False)}),
    ("Single device type, less already allocated to container than requested",
     (dev("Dev1", 0), dev("Dev2", 0), dev("Dev3", 1), dev("Dev4", 1)), set(), {"Dev1", "Dev2"}, 4, set()),
    ("Single device type, more already allocated to container than requested",
     (dev("Dev1", 0), dev("Dev2", 0), dev("Dev3", 1), dev("Dev4", 1)), set(),
     {"Dev1", "Dev2", "Dev3", "Dev4"}, 2, set()),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_kubelet_common_cases(case: tuple) -> None:  # type: ignore[type-arg]
    _, devices, elsewhere, here, request, expected = case
    got = resource_hints(NODES, ResourceDevices(devices, frozenset(elsewhere), frozenset(here)), request)
    assert as_set(got) == expected


def test_two_device_types_mixed_configuration() -> None:
    gpu = resource_hints(NODES, ResourceDevices(FOUR), 2)
    nic = resource_hints(NODES, ResourceDevices((dev("Dev1", 0),)), 1)
    assert as_set(gpu) == {h([0], True), h([1], True), h([0, 1], False)}
    assert as_set(nic) == {h([0], True), h([0, 1], False)}


def test_multi_node_device_and_reusable_take_the_explicit_path() -> None:
    both = Device("Dev1", frozenset({0, 1}))
    hints = device_hints((0, 1, 2), (both, dev("Dev2", 2)), ["Dev1", "Dev2"], [], 2)
    # Dev1 counts for any mask touching 0 or 1; both devices need a mask touching {0|1} and 2.
    assert set(hints) == {h([0, 2], True), h([1, 2], True), h([0, 1, 2], False)}
    reuse = device_hints((0, 1), FOUR, ["Dev3"], ["Dev2"], 2)
    assert set(reuse) == {h([0, 1], False)}  # the reusable Dev2 forces node 1 in, Dev3 forces node 0


def test_implicit_hints_iterate_to_the_kubelet_list_on_four_nodes() -> None:
    devices = (dev("a", 0), dev("b", 2), dev("c", 2))
    implicit = device_hints((0, 1, 2, 3), devices, ["a", "b"], [], 2)
    explicit = []
    for mask in range(1, 16):
        touching = sum(1 for d in ("a", "b") if mask & {"a": 1, "b": 4}[d])
        if touching >= 2:
            explicit.append(TopologyHint(mask, mask.bit_count() == 1))  # c+b fit on node 2 alone
    assert set(implicit) == set(explicit)


# TestTopologyAlignedAllocation (cases without a plugin preferred allocation)
ALIGNED = [
    ("Single Request, no alignment", 1, (dev("Dev1"), dev("Dev2")), [0, 1], {}),
    ("Request for 1, partial alignment", 1, (dev("Dev1"), dev("Dev2", 1)), [1], {1: 1}),
    ("Single Request, socket 0", 1, (dev("Dev1", 0), dev("Dev2", 1)), [0], {0: 1}),
    ("Single Request, socket 1", 1, (dev("Dev1", 0), dev("Dev2", 1)), [1], {1: 1}),
    ("Request for 2, socket 0", 2, FOUR, [0], {0: 2}),
    ("Request for 2, socket 1", 2, FOUR, [1], {1: 2}),
    ("Request for 4, unsatisfiable, prefer socket 0", 4,
     tuple(dev(f"Dev{i}", (i + 1) % 2) for i in range(1, 7)), [0], {0: 3, 1: 1}),
    ("Request for 4, unsatisfiable, prefer socket 1", 4,
     tuple(dev(f"Dev{i}", (i + 1) % 2) for i in range(1, 7)), [1], {0: 1, 1: 3}),
    ("Request for 4, multisocket", 4, tuple(dev(f"Dev{i}", (i - 1) % 4) for i in range(1, 9)), [1, 3],
     {1: 2, 3: 2}),
]


@pytest.mark.parametrize("case", ALIGNED, ids=[c[0] for c in ALIGNED])
def test_kubelet_aligned_allocation(case: tuple) -> None:  # type: ignore[type-arg]
    _, request, devices, hint, expected = case
    picked = devices_to_allocate(devices, [d.id for d in devices], request, mask_of(hint))
    assert len(picked) == request
    by_id = {d.id: d for d in devices}
    alignment: dict[int, int] = {}
    if any(d.numa for d in devices):
        for i in picked:
            numa = by_id[i].numa
            if numa:
                alignment[min(numa)] = alignment.get(min(numa), 0) + 1
    assert alignment == expected


def test_filter_by_affinity_splits_three_ways() -> None:
    devices = (dev("g0", 0), dev("g1", 1), dev("x"))
    assert filter_by_affinity(devices, ["g0", "g1", "x"], mask_of([1])) == (["g1"], ["g0"], ["x"])
    assert filter_by_affinity(devices, ["g0", "g1", "x"], None) == ([], [], ["g0", "g1", "x"])
    with pytest.raises(ValueError, match="only 3 available"):
        devices_to_allocate(devices, ["g0", "g1", "x"], 4, None)


def test_provider_groups_by_resource_and_skips_no_topology() -> None:
    provider = DeviceHintProvider(NODES, {"nvidia.com/gpu": [dev("gpu1", 1)], "nvme": [dev("n0")]})
    answer = provider.hints(None)
    assert answer is not None
    assert as_set(answer["nvidia.com/gpu"]) == {h([1], True), h([0, 1], False)}
    assert answer["nvme"] is None
