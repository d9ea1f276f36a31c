"""The static Memory Manager from the node's settings (engine/memory_policy.py): none unless the "memory"
provider is on (and then the capacities are not even read), else each node's capacity less the kubelet's
``--reserved-memory``, hugepages under the kubelet's names."""

from __future__ import annotations

from nri_pinner.config import from_mapping
from nri_pinner.engine.memory_policy import memory_policy
from nri_pinner.engine.memorymanager.state import MEMORY, MemoryState
from nri_pinner.engine.topology.memory import NodeMemory
from nri_pinner.engine.topology.model import CPUInfo, Topology

GIB, MIB = 1 << 30, 1 << 20
TWO_NODES = Topology(tuple(CPUInfo(cpu, cpu % 2, cpu // 2, cpu % 2, cpu % 2) for cpu in range(8)))
NODES = [NodeMemory(0, 8 * GIB, {2 * MIB: 512 * MIB}), NodeMemory(1, 8 * GIB)]


def test_without_the_memory_provider_there_is_no_policy_and_nothing_is_read() -> None:
    def never() -> list[NodeMemory]:
        raise AssertionError("capacities read with the memory provider off")

    assert memory_policy(from_mapping({}), TWO_NODES, never) is None
    assert memory_policy(from_mapping({"hints": {"providers": ["cpu", "devices"]}}), TWO_NODES, never) is None


def test_the_policy_holds_each_nodes_capacity_less_the_reserved_memory() -> None:
    settings = from_mapping({"hints": {"providers": ["cpu", "memory"]},
                             "memory_manager": {"reserved_memory": "0:memory=1Gi;1:memory=2Gi"}})
    policy = memory_policy(settings, TWO_NODES, lambda: NODES)
    assert policy is not None and policy.nodes == (0, 1)
    machine = policy.machine(MemoryState())
    node0, node1 = machine[0].tables, machine[1].tables
    # node 0's memory less its hugepages and its reserved GiB; node 1's less its 2 GiB
    assert node0[MEMORY].allocatable == 8 * GIB - 512 * MIB - GIB
    assert node1[MEMORY].allocatable == 6 * GIB
    assert node0["hugepages-2Mi"].allocatable == 512 * MIB and "hugepages-2Mi" not in node1
