"""The NIC hint provider: the kubelet device-manager rule, and admissions through the real engine
(CPU provider + static device hints + NICs) on a two-NUMA-node machine."""

from __future__ import annotations

import itertools

import pytest

from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.nicmanager.hints import RESOURCE, NicHintProvider, NicTable, nic_hints
from nri_pinner.engine.topology.model import CPUInfo, Topology
from nri_pinner.engine.topologymanager.hints import HintRequest, TopologyHint, mask_of, parse_static_hints

GPU_ON_0 = parse_static_hints({"vendor.com/gpu": [{"numa": [0], "preferred": True}]})
GPU_ON_1 = parse_static_hints({"vendor.com/gpu": [{"numa": [1], "preferred": True}]})


def kubelet_device_hints(nodes: list[int], device_nodes: list[int]) -> set[TopologyHint]:
    """generateDeviceTopologyHints restated: every mask whose devices cover the request; preferred
    when its size is the smallest size whose devices could cover it."""
    request = len(device_nodes)
    masks = [mask_of(c) for k in range(1, len(nodes) + 1) for c in itertools.combinations(nodes, k)]
    fits = [m for m in masks if sum(1 for d in device_nodes if m >> d & 1) >= request]
    smallest = min(m.bit_count() for m in fits)
    return {TopologyHint(m, m.bit_count() == smallest) for m in fits}


@pytest.mark.parametrize(("nodes", "nics"), [
    ([0, 1], [1]), ([0, 1], [0, 1]), ([0, 1, 2, 3], [2, 2]), ([0, 1, 2, 3], [3, 0]),
    ([0, 1, 2, 3, 4, 5, 6, 7], [5]), ([0, 2, 4], [4, 2, 2]),
])
def test_hints_follow_the_kubelet_device_rule(nodes: list[int], nics: list[int]) -> None:
    hints = nic_hints(nodes, nics)
    assert hints is not None and len(hints) == len(set(hints))
    assert set(hints) == kubelet_device_hints(nodes, nics)
    assert [h for h in hints if h.preferred] == [TopologyHint(mask_of(nics), True)]


def test_no_nics_or_only_unknown_nodes_mean_no_preference() -> None:
    assert nic_hints([0, 1], []) is None
    assert nic_hints([0, 1], [7]) is None  # a node the topology does not have: left out
    hints = nic_hints([0, 1], [1, 7])
    assert hints is not None and hints[0] == TopologyHint(0b10, True)


def test_provider_answers_only_for_exclusive_cpus_of_pods_with_nics() -> None:
    provider = NicHintProvider([0, 1], NicTable({"p": [1]}))
    assert provider.hints(HintRequest("p", "c", exclusive_cpus=0)) is None
    assert provider.hints(HintRequest("other", "c", exclusive_cpus=2)) is None
    answer = provider.hints(HintRequest("p", "c", exclusive_cpus=2))
    assert answer is not None and list(answer[RESOURCE] or ()) == [TopologyHint(0b10, True), TopologyHint(0b11, False)]
    again = provider.hints(HintRequest("p", "c", allocated_cpus=CPUSet.parse("4")))
    assert again == answer  # a restarted container keeps its NIC hints


def two_nodes() -> Topology:
    """2 sockets x 1 NUMA node x 4 cores, no SMT: node 0 = CPUs 0-3, node 1 = CPUs 4-7."""
    return Topology(cpus=tuple(CPUInfo(cpu=c, socket=c // 4, core=c, numa=c // 4, l3=c // 4) for c in range(8)))


def engine(policy: str, nics: NicTable, scope: str = "container") -> Engine:
    settings = from_mapping({"cpu_manager": {"reserved_cpus": "0"}, "hints": {"providers": ["cpu", "nics"]},
                             "topology_manager": {"policy": policy, "scope": scope}})
    topology = two_nodes()
    return Engine.from_settings(settings, topology, [NicHintProvider(topology.numa_nodes, nics)])


def guaranteed(pod: str, cpus: int, **extra: object) -> AdmissionRequest:
    return AdmissionRequest(pod, "main", "guaranteed", cpus * 1000, cpus * 1000, **extra)  # type: ignore[arg-type]


def test_container_lands_on_its_nics_node_under_single_numa_node() -> None:
    eng = engine("single-numa-node", NicTable({"net": [1]}))
    state = eng.initial_state()
    state, plain = eng.admit(state, guaranteed("plain", 2))
    assert plain.admitted and plain.cpus == CPUSet.parse("1-2")  # no NIC: the kubelet's lowest node
    state, nic = eng.admit(state, guaranteed("net", 2))
    assert nic.admitted and nic.cpus == CPUSet.parse("4-5") and nic.mems == (1,)
    assert nic.hint == TopologyHint(0b10, True)


def test_rejected_naming_the_nic_provider_when_its_node_is_full() -> None:
    eng = engine("single-numa-node", NicTable({"net": [1]}))
    state = eng.initial_state()
    state, filler = eng.admit(state, guaranteed("filler", 3))
    assert filler.admitted and filler.cpus == CPUSet.parse("1-3")  # node 0 (cpu 0 is reserved)
    state, filler2 = eng.admit(state, guaranteed("filler2", 3))
    assert filler2.admitted and filler2.cpus == CPUSet.parse("4-6")
    _, nic = eng.admit(state, guaranteed("net", 1))  # only CPU 7 is left, on node 1: fits
    assert nic.admitted and nic.cpus == CPUSet.parse("7")
    _, too_big = eng.admit(state, guaranteed("net", 2))
    assert not too_big.admitted and too_big.reason == "TopologyAffinityError"
    assert "nics prefers {1}" in too_big.message and "cpu prefers nothing" in too_big.message


def test_nic_on_one_node_and_device_on_the_other() -> None:
    nics = NicTable({"p": [1]})
    for policy in ("single-numa-node", "restricted"):
        eng = engine(policy, nics)
        _, d = eng.admit(eng.initial_state(), guaranteed("p", 2, hints=GPU_ON_0))
        assert not d.admitted and d.reason == "TopologyAffinityError", policy
        assert "static (vendor.com/gpu) prefers {0}" in d.message and "nics prefers {1}" in d.message
    eng = engine("best-effort", nics)  # the device offers node 0 only, the NIC can widen to {0,1}: node 0
    _, d = eng.admit(eng.initial_state(), guaranteed("p", 2, hints=GPU_ON_0))
    assert d.admitted and d.hint == TopologyHint(0b01, False) and d.cpus == CPUSet.parse("1-2")
    eng = engine("single-numa-node", nics)
    _, d = eng.admit(eng.initial_state(), guaranteed("p", 2, hints=GPU_ON_1))
    assert d.admitted and d.cpus == CPUSet.parse("4-5")


def test_nics_on_both_nodes_need_both_nodes() -> None:
    nics = NicTable({"p": [0, 1]})
    _, d = engine("single-numa-node", nics).admit(two_nodes_state(nics), guaranteed("p", 2))
    assert not d.admitted and "nics prefers {0,1}" in d.message
    _, d = engine("restricted", nics).admit(two_nodes_state(nics), guaranteed("p", 2))
    assert not d.admitted  # CPUs fit one node, the NICs span two: no preferred merged hint
    _, d = engine("best-effort", nics).admit(two_nodes_state(nics), guaranteed("p", 2))
    assert d.admitted and d.hint == TopologyHint(0b11, False)


def two_nodes_state(nics: NicTable) -> EngineState:
    return engine("none", nics).initial_state()


def test_pod_scope_aligns_the_whole_pod_with_its_nic() -> None:
    eng = engine("single-numa-node", NicTable({"p": [1]}), scope="pod")
    _, first = eng.admit(eng.initial_state(), guaranteed("p", 1, pod_exclusive_cpus=3))
    assert first.admitted and first.cpus.issubset(CPUSet.parse("4-7")) and first.hint == TopologyHint(0b10, True)


def test_shared_containers_are_not_constrained_by_nics() -> None:
    eng = engine("single-numa-node", NicTable({"p": [1]}))
    _, d = eng.admit(eng.initial_state(), AdmissionRequest("p", "side", "burstable", 500, 1000))
    assert d.admitted and not d.exclusive and d.hint == TopologyHint(None, True)


def test_an_enabled_provider_must_be_wired() -> None:
    settings = from_mapping({"hints": {"providers": ["cpu", "nics"]}})
    with pytest.raises(ValueError, match=r"\['nics'\] enabled but not wired"):
        Engine.from_settings(settings, two_nodes())
    assert from_mapping({"hints": {"providers": ["cpu", "nics"]}}).hints.providers == ("cpu", "nics")
