"""The static Memory Manager a node runs, from its settings and its NUMA nodes' capacities.

The capacities are read from sysfs by the caller (edge/request_intake.py: `read_node_memory`); they
are asked for only when the "memory" hint provider is on."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..config import Settings
from .memorymanager.policy import StaticMemoryPolicy
from .memorymanager.provider import build_policy, parse_reserved_memory
from .memorymanager.state import hugepage_resource
from .topology.memory import NodeMemory
from .topology.model import Topology


def memory_policy(settings: Settings, topology: Topology,
                  read_nodes: Callable[[], Sequence[NodeMemory]]) -> StaticMemoryPolicy | None:
    """The static Memory Manager when the "memory" provider is on (else None, and ``read_nodes`` is not
    called): each node's memory and hugepage totals less the kubelet's ``--reserved-memory``, on the
    CPU nodes of ``topology`` (memory-only nodes attach by their distances)."""
    if "memory" not in settings.hints.providers:
        return None
    nodes = read_nodes()
    return build_policy(
        topology.numa_nodes, {n.node: n.memory_bytes for n in nodes},
        {n.node: {hugepage_resource(page): total for page, total in n.hugepages.items()} for n in nodes},
        parse_reserved_memory(settings.memory_manager.reserved_memory),
        {n.node: n.distances for n in nodes})
