"""Fractional -> integer resize aligned as a create is (README "Resize": devices and memory).

The container's devices come from a generated sysfs tree through the real resolver (a GPU on
node 1); its memory blocks are the Memory Manager's, allocated at its create. The fresh
exclusive admission of the resize sees the devices (the service passes what a create is asked)
and the blocks' nodes (the engine asks the memory provider with the held blocks: it hints their
nodes and allocates nothing new)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_box import GB, engine_for, write_gpu_box

from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.devicemanager.hints import Device
from nri_pinner.engine.memorymanager.provider import memory_state
from nri_pinner.engine.memorymanager.state import MEMORY
from nri_pinner.engine.topology.pci import DeviceResolver


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gpu_box(tmp_path_factory.mktemp("gpu-box"))


def gpu1(root: Path) -> dict[str, list[Device]]:
    found = DeviceResolver(root).resolve("c", 195, 1)
    assert found is not None and found.numa == frozenset({1})  # what sysfs says, not a typed-in number
    return {found.driver: [Device(found.id, found.numa)]}


def fractional(pod: str, **kw: object) -> AdmissionRequest:
    return AdmissionRequest(pod, "c", "guaranteed", 500, 500, **kw)  # type: ignore[arg-type]


def fill(e: Engine, state: EngineState, node: int, leave: int) -> EngineState:
    """Exclusive containers on `node` until `leave` of its CPUs are free."""
    free = len(e.policy.available_for_exclusive(state) & e.topology.numa_cpus[node])
    if free > leave:
        milli, here = (free - leave) * 1000, {"g": [Device("x", frozenset({node}))]}
        state, d = e.admit(state, AdmissionRequest(f"fill{node}", "c", "guaranteed", milli, milli, devices=here))
        assert d.admitted
    assert len(e.policy.available_for_exclusive(state) & e.topology.numa_cpus[node]) == leave
    return state


def test_to_exclusive_under_single_numa_node_lands_on_the_gpus_node(box: Path) -> None:
    e = engine_for(box, "single-numa-node", memory=False)
    like = fractional("g", devices=gpu1(box))
    state, d = e.admit(e.initial_state(), like)
    assert d.admitted and not d.exclusive
    # CPU-only (no template): the lowest free node, away from the GPU -- what the template fixes
    _, blind = e.resize(state, "g", "c", "guaranteed", 2000, 2000)
    assert blind.applied and e.topology.numa_of(blind.cpus) == [0]
    after, rd = e.resize(state, "g", "c", "guaranteed", 2000, 2000, like=like)
    assert rd.applied and rd.kind == "to-exclusive" and len(rd.cpus) == 2
    assert e.topology.numa_of(rd.cpus) == [1] and rd.mems == (1,)
    a = after.get("g", "c")
    assert a is not None and a.exclusive and a.admitted == rd.cpus  # the new baseline


def test_to_exclusive_refused_when_the_gpus_node_is_full_names_the_devices(box: Path) -> None:
    e = engine_for(box, "single-numa-node", memory=False)
    like = fractional("g", devices=gpu1(box))
    state, _ = e.admit(e.initial_state(), like)
    state = fill(e, state, 1, leave=1)
    after, rd = e.resize(state, "g", "c", "guaranteed", 2000, 2000, like=like)
    assert not rd.applied and rd.reason == "TopologyAffinityError" and after is state
    assert "cannot be satisfied: cpu (conflicts with devices[nvidia])" in rd.message
    a = state.get("g", "c")
    assert a is not None and not a.exclusive


def test_best_effort_prefers_the_gpus_node_and_never_refuses(box: Path) -> None:
    e = engine_for(box, "best-effort", memory=False)
    like = fractional("g", devices=gpu1(box))
    state, _ = e.admit(e.initial_state(), like)
    _, rd = e.resize(state, "g", "c", "guaranteed", 3000, 3000, like=like)
    assert rd.applied and e.topology.numa_of(rd.cpus) == [1]
    full = fill(e, state, 1, leave=0)
    _, rd = e.resize(full, "g", "c", "guaranteed", 3000, 3000, like=like)
    assert rd.applied and e.topology.numa_of(rd.cpus) == [0]  # off node, as a best-effort create


@pytest.mark.parametrize("policy", ["single-numa-node", "best-effort"])
def test_held_memory_steers_the_cpus_and_is_not_allocated_again(box: Path, policy: str) -> None:
    """No template at all (simulate's update op): the held blocks alone align the new CPUs."""
    e = engine_for(box, policy, memory=True)
    state, d = e.admit(e.initial_state(), fractional("m", devices=gpu1(box), memory={MEMORY: 2 * GB}))
    assert d.admitted and not d.exclusive
    blocks = memory_state(state.providers["memory"]).get("m", "c")
    assert blocks is not None and blocks[0].numa == (1,)
    after, rd = e.resize(state, "m", "c", "guaranteed", 2000, 2000)
    assert rd.applied and e.topology.numa_of(rd.cpus) == [1] and rd.mems == (1, 2)
    assert memory_state(after.providers["memory"]).get("m", "c") == blocks  # the same blocks, not twice
    assert memory_state(after.providers["memory"]).to_list() == memory_state(state.providers["memory"]).to_list()
    full = fill(e, state, 1, leave=1)
    after, rd = e.resize(full, "m", "c", "guaranteed", 2000, 2000)
    if policy == "single-numa-node":
        assert not rd.applied and rd.reason == "TopologyAffinityError" and after is full
        assert "cannot be satisfied: cpu (conflicts with memory" in rd.message
    else:
        assert rd.applied and 0 in e.topology.numa_of(rd.cpus) and rd.mems == (1, 2)  # memory did not move
        assert memory_state(after.providers["memory"]).get("m", "c") == blocks
