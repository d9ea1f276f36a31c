"""CPU + device + memory alignment through the engine facade (the issue's acceptance cases).

Devices come from a generated sysfs tree (scripts/gen_sysfs_devices.py) through the real
resolver, so the GPU's NUMA node is what sysfs says, not a number typed into the test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpu_box import GB, engine_for, write_gpu_box

from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.devicemanager.hints import Device
from nri_pinner.engine.memorymanager.provider import memory_state
from nri_pinner.engine.memorymanager.state import MEMORY
from nri_pinner.engine.topology.model import CPUInfo, Topology
from nri_pinner.engine.topology.pci import DeviceResolver
from nri_pinner.engine.topologymanager.hints import mask_of


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gpu_box(tmp_path_factory.mktemp("gpu-box"))


def gpu(root: Path, minor: int) -> dict[str, list[Device]]:
    found = DeviceResolver(root).resolve("c", 195, minor)
    assert found is not None
    return {found.driver: [Device(found.id, found.numa)]}


def req(pod: str, cpus: int, **kw: Any) -> AdmissionRequest:
    return AdmissionRequest(pod, "c", "guaranteed", cpus * 1000, cpus * 1000, **kw)


def test_single_numa_node_puts_cpus_on_the_gpus_node(box: Path) -> None:
    e = engine_for(box, "single-numa-node", memory=False)
    topo = e.topology
    state, d = e.admit(e.initial_state(), req("a", 2, devices=gpu(box, 1)))
    assert d.admitted and d.hint is not None and d.hint.affinity == mask_of([1])
    assert d.cpus & topo.numa_cpus[1] == d.cpus and d.mems == (1,)  # no memory manager: CPUs' nodes
    assert d.provider_hints["devices"] == {"nvidia": "{1} {0,1}~"}
    state, d0 = e.admit(state, req("b", 2, devices=gpu(box, 0)))
    assert d0.admitted and d0.cpus & topo.numa_cpus[0] == d0.cpus


def test_single_numa_node_rejects_naming_cpu_when_the_gpu_node_is_full(box: Path) -> None:
    e = engine_for(box, "single-numa-node", memory=False)
    state, d = e.admit(e.initial_state(), req("fill", 6))  # node 1 has 7 free CPUs (8 is reserved)
    assert d.admitted
    state, d = e.admit(state, req("fill2", 6))
    assert d.admitted
    on_one = [n for n in (0, 1) if not (e.policy.available_for_exclusive(state) & e.topology.numa_cpus[n])]
    assert on_one, "one node must be out of free CPUs for this test"
    full = on_one[0]
    after, d = e.admit(state, req("gpu", 2, devices=gpu(box, full)))
    assert not d.admitted and d.reason == "TopologyAffinityError"
    assert d.blamed[0] == "cpu" and "devices[nvidia]" in d.blamed[1:]
    assert "cannot be satisfied: cpu (conflicts with devices[nvidia])" in d.message
    assert after is state


def test_no_affinity_device_adds_no_constraint(box: Path) -> None:
    e = engine_for(box, "single-numa-node", memory=False)
    _, d = e.admit(e.initial_state(), req("a", 2, devices=gpu(box, 2)))
    assert d.admitted and d.provider_hints["devices"] == {"nvidia": "any"}


def test_best_effort_admits_off_node_and_prefer_closest_picks_the_nearer_pair() -> None:
    # 4 NUMA nodes x 4 CPUs; node 3 is near node 1 only: {1,3} is the closest pair besides ones with node 2
    cpus = tuple(CPUInfo(cpu=c, socket=0, core=c, numa=c // 4, l3=c // 4) for c in range(16))
    far = [[10, 30, 30, 30], [30, 10, 30, 12], [30, 30, 10, 30], [30, 12, 30, 10]]
    topo = Topology(cpus=cpus, numa_distances={a: {b: far[a][b] for b in range(4)} for a in range(4)})
    gpu2 = {"gpu": [Device("g", frozenset({2}))]}

    def run(options: list[str]) -> Any:
        e = Engine.from_settings(from_mapping({
            "cpu_manager": {"reserved_cpus": "0"},
            "topology_manager": {"policy": "best-effort", "policy_options": options},
            "hints": {"providers": ["cpu", "devices"]}}), topo)
        state, d = e.admit(e.initial_state(), req("fill", 4, hints={}))
        state, d = e.admit(state, req("x", 4))
        assert d.admitted
        return e.admit(state, req("big", 6, devices=gpu2))[1]

    plain, closest = run([]), run(["prefer-closest-numa-nodes"])
    assert plain.admitted and closest.admitted  # best-effort never rejects
    assert plain.hint is not None and closest.hint is not None and not closest.hint.preferred
    assert closest.hint.affinity == mask_of([1, 3])
    assert plain.hint.affinity != closest.hint.affinity


def test_memory_follows_the_merged_hint_and_is_released(box: Path) -> None:
    e = engine_for(box, "single-numa-node", reserved_memory="1:memory=1Gi")
    state, d = e.admit(e.initial_state(), req("m", 2, devices=gpu(box, 1), memory={MEMORY: 2 * GB}))
    assert d.admitted and d.mems == (1, 2)  # memory-only node 2 is nearest node 1
    blocks = memory_state(state.providers["memory"]).get("m", "c")
    assert blocks is not None and blocks[0].numa == (1,)
    assert e.memory_mems(state, "m", "c") == (1, 2)
    # the checkpointed form comes back
    from nri_pinner.engine.cpumanager.state import EngineState
    again = EngineState.from_dict(state.to_dict())
    assert e.memory_mems(again, "m", "c") == (1, 2)
    state = e.remove(state, "m", "c")
    assert memory_state(state.providers["memory"]).get("m", "c") is None


def test_memory_rejection_names_the_memory_provider(box: Path) -> None:
    e = engine_for(box, "single-numa-node")
    # node 1 has 8 GiB + node 2's 8 GiB attached; ask for more than node 1 (with node 2) holds
    _, d = e.admit(e.initial_state(), req("m", 2, devices=gpu(box, 1), memory={MEMORY: 17 * GB}))
    assert not d.admitted and d.reason == "TopologyAffinityError"
    assert d.blamed and d.blamed[0].startswith("memory")


def test_best_effort_memory_without_merged_affinity_uses_its_own_best_hint(box: Path) -> None:
    e = engine_for(box, "none")
    state, d = e.admit(e.initial_state(), req("m", 2, memory={MEMORY: GB}))
    assert d.admitted and d.mems == (0,)
    _, shared = e.admit(state, AdmissionRequest("s", "c", "burstable", 500, 1000, memory={MEMORY: GB}))
    assert shared.admitted and memory_state(state.providers["memory"]).get("s", "c") is None
