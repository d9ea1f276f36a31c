"""A rejection's "prefers …" text takes a shortcut for CPU and memory hint lists (preferred = by size);
it must say what walking the list says."""

from __future__ import annotations

import itertools
import random

from kube_topologies import _build

from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.memorymanager.hints import MemoryHints
from nri_pinner.engine.memorymanager.provider import MemoryHintProvider, build_policy
from nri_pinner.engine.memorymanager.state import MemoryState
from nri_pinner.engine.topology.model import Topology
from nri_pinner.engine.topologymanager import explain
from nri_pinner.engine.topologymanager.hints import HintRequest, TopologyHint, format_mask

GB = 1 << 30


def walked(hints: list[TopologyHint]) -> list[str]:
    """The rule written out: the first run of preferred hints among the first 256, at most 4."""
    out: list[str] = []
    for h in itertools.islice(hints, 256):
        if out and not h.preferred:
            break
        if h.preferred:
            out.append(format_mask(h.affinity))
            if len(out) == 4:
                break
    return out


def machine(nodes: int, per_node: int) -> Topology:
    """Two sockets of nodes/2 NUMA nodes, one thread per core."""
    return _build(nodes * per_node, lambda cpu: (cpu // per_node * 2 // nodes, cpu, cpu // per_node,
                                                 cpu // per_node * 2 // nodes))


def test_memory_hints_shortcut_says_what_the_walk_says() -> None:
    rng = random.Random(7)
    topology = machine(8, 4)
    nodes = topology.numa_nodes
    seen = {"none": 0, "some": 0}
    for trial in range(300):
        free = {n: rng.choice((0, 1, 2, 4, 8)) * GB for n in nodes}
        policy = build_policy(nodes, free, {n: {} for n in nodes}, {n: {"memory": 0} for n in nodes})
        settings = from_mapping({"cpu_manager": {"reserved_cpu_count": 1},
                                 "topology_manager": {"policy": "restricted"},
                                 "hints": {"providers": ["cpu", "memory"]}})
        engine = Engine.from_settings(settings, topology, [], memory=policy)
        state = engine.initial_state()
        for i in range(rng.randrange(4)):  # some containers first: used nodes give extra hints
            state, _ = engine.admit(state, AdmissionRequest(f"f{i}", "c", "guaranteed", 1000, 1000,
                                                            memory={"memory": rng.choice((1, 3, 6)) * GB}))
        want = rng.choice((1, 3, 6, 12, 20)) * GB
        assert engine.memory is not None
        mstate: MemoryState = engine._memory_state(state)
        answer = MemoryHintProvider(engine.memory, mstate, "p", "c", {"memory": want}).hints(
            HintRequest("p", "c", exclusive_cpus=1))
        hints = answer["memory"] if answer else None
        if not isinstance(hints, MemoryHints):
            continue
        got = explain._leading_preferred(hints)
        assert got == walked(list(itertools.islice(hints, 300))), (trial, hints)
        seen["some" if got else "none"] += 1
    assert seen["none"] > 10 and seen["some"] > 10, seen  # both branches of the shortcut ran

