"""Init-container memory reuse in the Memory Manager's static policy: the kubelet's expectations, ported.

Source: kubernetes/kubernetes pkg/kubelet/cm/memorymanager/policy_static_test.go at commit
1c9cf914f2f951313b8e9f7c321f5bd50b5e3d9f (``TestStaticPolicyAllocateWithInitContainers``,
``TestStaticPolicyAllocateWithRestartableInitContainers``); rules from policy_static.go
(``getPodReusableMemory``, ``updatePodReusableMemory``, ``updateInitContainersMemoryBlocks``).
Each kubelet case allocates every init container, then every app container, with an empty
topology hint, and checks the blocks (init blocks shrink by what later containers reuse) and the
node's tables. The kubelet's tables are given directly; here capacities are chosen so that the
replayed tables carry the same allocatable figures.
"""

from __future__ import annotations

import pytest
from kube_topologies import dual_socket_ht

from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.memorymanager.policy import NodeCapacity, StaticMemoryPolicy
from nri_pinner.engine.memorymanager.provider import build_policy, memory_state
from nri_pinner.engine.memorymanager.state import MEMORY, Block, MemoryState
from nri_pinner.engine.topologymanager.hints import TopologyHint, mask_of

MB = 1 << 20
GB = 1 << 30
HP1G = "hugepages-1Gi"

Spec = tuple[str, int, str]  # (container, GiB of memory and of 1Gi hugepages, "init" | "sidecar" | "app")


def one_node(memory: int, hugepages: int) -> StaticMemoryPolicy:
    """Node 0 with ``memory`` allocatable bytes (512 MiB reserved) and ``hugepages`` of 1Gi pages."""
    return StaticMemoryPolicy([NodeCapacity(0, memory + 512 * MB + hugepages, {HP1G: hugepages})],
                              {0: {MEMORY: 512 * MB}})


def run_pod(p: StaticMemoryPolicy, specs: list[Spec], state: MemoryState | None = None,
            pod: str = "pod1") -> MemoryState:
    state = state or MemoryState()
    for name, gib, kind in specs:
        state = p.allocate(state, pod, name, {MEMORY: gib * GB, HP1G: gib * GB}, None, init=kind == "init")
    return state


def sizes(state: MemoryState, pod: str = "pod1") -> dict[str, tuple[int, int]]:
    """GiB of (memory, hugepages) per container."""
    out = {}
    for (p, c), blocks in state.blocks.items():
        if p == pod:
            by_type = {b.type: b.size for b in blocks}
            assert all(b.numa == (0,) for b in blocks)
            out[c] = (by_type[MEMORY] // GB, by_type[HP1G] // GB)
    return out


CASES = [
    ("init 1Gi+2Gi, apps 3Gi+4Gi", 7680 * MB, 8 * GB,
     [("initContainer1", 1, "init"), ("initContainer2", 2, "init"), ("container1", 3, "app"), ("container2", 4, "app")],
     {"initContainer1": 0, "initContainer2": 0, "container1": 3, "container2": 4}, 7),
    ("init 4Gi+3Gi, apps 2Gi+1Gi", 7680 * MB, 8 * GB,
     [("initContainer1", 4, "init"), ("initContainer2", 3, "init"), ("container1", 2, "app"), ("container2", 1, "app")],
     {"initContainer1": 0, "initContainer2": 1, "container1": 2, "container2": 1}, 4),
    ("init 7Gi+4Gi, apps 4Gi+3Gi", 7680 * MB, 8 * GB,
     [("initContainer1", 7, "init"), ("initContainer2", 4, "init"), ("container1", 4, "app"), ("container2", 3, "app")],
     {"initContainer1": 0, "initContainer2": 0, "container1": 4, "container2": 3}, 7),
    ("init 7Gi+4Gi, apps 5Gi+2Gi", 10 * GB, 10 * GB,
     [("initContainer1", 7, "init"), ("initContainer2", 4, "init"), ("container1", 5, "app"), ("container2", 2, "app")],
     {"initContainer1": 0, "initContainer2": 0, "container1": 5, "container2": 2}, 7),
    ("restartable init containers are not reused", 7 * GB, 7 * GB,
     [("initContainer1", 1, "init"), ("restartableInitContainer2", 2, "sidecar"), ("initContainer3", 3, "init"),
      ("restartableInitContainer4", 4, "sidecar"), ("container1", 1, "app")],
     {"initContainer1": 0, "restartableInitContainer2": 2, "initContainer3": 0, "restartableInitContainer4": 4,
      "container1": 1}, 7),
]


@pytest.mark.parametrize(("memory", "hugepages", "specs", "expected", "reserved_gib"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_kubelet_init_container_cases(memory: int, hugepages: int, specs: list[Spec],
                                      expected: dict[str, int], reserved_gib: int) -> None:
    p = one_node(memory, hugepages)
    state = run_pod(p, specs)
    assert sizes(state) == {c: (g, g) for c, g in expected.items()}
    node = p.machine(state)[0]
    assert node.tables[MEMORY].reserved == node.tables[HP1G].reserved == reserved_gib * GB
    assert node.tables[MEMORY].free == memory - reserved_gib * GB
    assert node.tables[HP1G].free == hugepages - reserved_gib * GB
    assert node.assignments == 2 * len(specs)  # the kubelet's NumberOfAssignments


def test_containers_already_in_the_state_change_nothing() -> None:
    """Kubelet case "should do nothing once containers already exist under the state file"."""
    p = one_node(2 * GB, 2 * GB)
    state = MemoryState({("pod1", "initContainer1"): (Block((0,), MEMORY, GB),),
                         ("pod1", "container1"): (Block((0,), MEMORY, GB),)})
    after = p.allocate(state, "pod1", "initContainer1", {MEMORY: GB}, None)  # a sidecar: not init
    after = p.allocate(after, "pod1", "container1", {MEMORY: GB}, None)
    assert after.blocks == state.blocks
    assert p.machine(after)[0].tables[MEMORY].reserved == 2 * GB


def two_nodes() -> StaticMemoryPolicy:
    return StaticMemoryPolicy([NodeCapacity(n, 5 * GB) for n in range(2)])


def test_reusable_memory_counts_as_free_in_the_pods_hints() -> None:
    """``calculateHints`` adds ``getPodReusableMemory`` for the mask the init block is on."""
    p = two_nodes()
    state = p.allocate(MemoryState(), "pod1", "init", {MEMORY: 4 * GB}, TopologyHint(mask_of([0]), True), init=True)
    own = p.hints(state, "pod1", "app", {MEMORY: 3 * GB})
    other = p.hints(state, "pod2", "app", {MEMORY: 3 * GB})
    assert own is not None and other is not None
    assert [(h.affinity, h.preferred) for h in own[MEMORY]] == [(0b01, True), (0b10, True)]
    assert [(h.affinity, h.preferred) for h in other[MEMORY]] == [(0b10, True)]  # node 0 has 1 GiB free
    app = p.allocate(state, "pod1", "app", {MEMORY: 3 * GB}, TopologyHint(mask_of([0]), True))
    assert app.blocks[("pod1", "init")] == (Block((0,), MEMORY, GB),)
    assert p.machine(app)[0].tables[MEMORY].reserved == 4 * GB


def test_reuse_needs_the_same_nodes() -> None:
    p = two_nodes()
    state = p.allocate(MemoryState(), "pod1", "init", {MEMORY: 2 * GB}, TopologyHint(mask_of([0]), True), init=True)
    state = p.allocate(state, "pod1", "app", {MEMORY: 2 * GB}, TopologyHint(mask_of([1]), True))
    assert state.blocks[("pod1", "init")] == (Block((0,), MEMORY, 2 * GB),)
    machine = p.machine(state)
    assert (machine[0].tables[MEMORY].reserved, machine[1].tables[MEMORY].reserved) == (2 * GB, 2 * GB)


def test_another_pods_allocation_forgets_the_reusable_memory() -> None:
    """``updatePodReusableMemory`` deletes every other pod's entry when a container is allocated."""
    p = two_nodes()
    state = p.allocate(MemoryState(), "pod1", "init", {MEMORY: 2 * GB}, TopologyHint(mask_of([0]), True), init=True)
    state = p.allocate(state, "pod2", "c", {MEMORY: GB}, TopologyHint(mask_of([1]), True))
    assert state.reusable("pod1") == {}
    state = p.allocate(state, "pod1", "app", {MEMORY: 2 * GB}, TopologyHint(mask_of([0]), True))
    assert state.blocks[("pod1", "init")] == (Block((0,), MEMORY, 2 * GB),)  # nothing reused
    assert p.machine(state)[0].tables[MEMORY].reserved == 4 * GB


def test_removing_an_init_container_releases_what_it_still_holds() -> None:
    p = one_node(8 * GB, 0)
    state = p.allocate(MemoryState(), "pod1", "init", {MEMORY: 4 * GB}, None, init=True)
    state = p.allocate(state, "pod1", "app", {MEMORY: 3 * GB}, None)
    assert p.machine(state)[0].tables[MEMORY].reserved == 4 * GB
    state = p.remove(state, "pod1", "init")
    assert state.sources == frozenset() and state.reusable("pod1") == {}
    assert p.machine(state)[0].tables[MEMORY].reserved == 3 * GB
    state = p.remove(state, "pod1", "app")
    assert p.machine(state)[0].tables[MEMORY].reserved == 0


def test_checkpoint_form_is_unchanged_and_old_checkpoints_read() -> None:
    p = one_node(8 * GB, 0)
    state = p.allocate(MemoryState(), "pod1", "init", {MEMORY: 4 * GB}, None, init=True)
    state = p.allocate(state, "pod1", "app", {MEMORY: 3 * GB}, None)
    data = state.to_list()
    assert data == [{"pod": "pod1", "container": "init", "blocks": [{"numa": [0], "type": MEMORY, "size": GB}]},
                    {"pod": "pod1", "container": "app", "blocks": [{"numa": [0], "type": MEMORY, "size": 3 * GB}]}]
    back = MemoryState.from_list(data)
    assert back.blocks == state.blocks and back.sources == frozenset()
    assert p.machine(back)[0].tables[MEMORY].reserved == 4 * GB


# -- through the engine: AdmissionRequest.init reaches the Memory Manager ---------------------------


def engine() -> Engine:
    topology = dual_socket_ht()  # 12 CPUs, NUMA nodes 0 and 1
    memory = build_policy(topology.numa_nodes, {0: 8 * GB, 1: 8 * GB})
    settings = from_mapping({"cpu_manager": {"reserved_cpu_count": 1},
                             "topology_manager": {"policy": "single-numa-node"},
                             "hints": {"providers": ["cpu", "memory"]}})
    return Engine.from_settings(settings, topology, memory=memory)


def admit(e: Engine, state: object, container: str, gib: int, *, init: bool = False, milli: int = 1000) -> object:
    from nri_pinner.engine.cpumanager.state import EngineState
    assert isinstance(state, EngineState)
    new, decision = e.admit(state, AdmissionRequest("pod1", container, "guaranteed", milli, milli, init=init,
                                                    memory={MEMORY: gib * GB}))
    assert decision.admitted, decision.message
    return new


def test_engine_passes_init_containers_to_the_memory_manager() -> None:
    e = engine()
    state = admit(e, e.initial_state(), "init", 6, init=True)
    state = admit(e, state, "app", 5)  # 2 GiB free on the init's node: fits only by reusing its memory
    from nri_pinner.engine.cpumanager.state import EngineState
    assert isinstance(state, EngineState)
    m = memory_state(state.providers["memory"])
    assert m.blocks[("pod1", "init")][0].size == GB
    assert m.blocks[("pod1", "init")][0].numa == m.blocks[("pod1", "app")][0].numa
    assert e.memory is not None
    node = m.blocks[("pod1", "app")][0].numa[0]
    assert e.memory.machine(m)[node].tables[MEMORY].reserved == 6 * GB


@pytest.mark.parametrize("milli", [1000, 1500], ids=["exclusive-cpus", "shared-cpus"])
def test_engine_does_not_reuse_a_sidecars_memory(milli: int) -> None:
    """An init container the service later marks restartable (still running when an app container
    came) lends nothing: the app's memory is new, the sidecar's block stays whole."""
    from dataclasses import replace

    from nri_pinner.engine.cpumanager.state import EngineState
    e = engine()
    state = admit(e, e.initial_state(), "sidecar", 6, init=True, milli=milli)
    assert isinstance(state, EngineState)
    a = state.get("pod1", "sidecar")
    assert a is not None
    state = state.with_changes(put=replace(a, restartable=True), reusable={})  # as the service marks sidecars
    new, decision = e.admit(state, AdmissionRequest("pod1", "app", "guaranteed", 1000, 1000,
                                                    memory={MEMORY: 5 * GB}))
    assert decision.admitted
    m = memory_state(new.providers["memory"])
    assert m.blocks[("pod1", "sidecar")][0].size == 6 * GB
    assert m.blocks[("pod1", "sidecar")][0].numa != m.blocks[("pod1", "app")][0].numa
