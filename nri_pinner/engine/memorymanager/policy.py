"""The kubelet Memory Manager's static policy (v1.32 ``policy_static.go`` rules).

Per NUMA node and resource (``memory``, ``hugepages-<size>``): allocatable = total -
reserved (``reserved_memory``, the kubelet's ``--reserved-memory``), and for ``memory`` also
minus the node's hugepages. A Guaranteed container's request gets hints over every NUMA mask
with enough allocatable and free memory of each requested kind, preferred when the mask is as
small as the smallest one with enough *allocatable* memory. Group rules: a node holding a
single-NUMA allocation never joins a multi-node mask, a node already in a group is reused only
with that same group, and a node in a group is not offered alone
(``isAffinityViolatingNUMAAllocations`` enforces the same at allocation). Allocation takes the
merged hint (or the best own hint when the merge has no preference), extends it when it cannot
hold the request, and fills the mask's nodes in order. Init-container memory is reused by
later containers of the pod (``MemoryState.reusable``, ``allocate(init=...)``).

Memory-only NUMA nodes (CXL/HBM) are attached to their nearest CPU node: their capacity counts
for it and they join ``cpuset.mems`` whenever it does (:meth:`StaticMemoryPolicy.expand`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import AdmissionError
from ..topologymanager.hints import TopologyHint, is_narrower_than, mask_of, nodes_of
from .hints import MemoryHints, min_affinity
from .state import MEMORY, Block, Machine, MemoryState, NodeState, Table


class MemoryAllocationError(AdmissionError):
    """The memory manager could not place a Guaranteed container's memory."""

    reason = "MemoryAllocationError"


@dataclass(frozen=True)
class NodeCapacity:
    """One NUMA node's memory: total ``memory`` bytes and total bytes per hugepage resource."""

    node: int
    memory: int
    hugepages: Mapping[str, int] = field(default_factory=dict)


class StaticMemoryPolicy:
    def __init__(self, capacity: Sequence[NodeCapacity], reserved: Mapping[int, Mapping[str, int]] | None = None,
                 attached: Mapping[int, int] | None = None) -> None:
        """``capacity``: the nodes hints range over; ``attached``: memory-only node -> CPU node."""
        if not capacity:
            raise ValueError("memory manager needs at least one NUMA node with memory")
        reserved = reserved or {}
        self.nodes = tuple(sorted(c.node for c in capacity))
        self.attached = dict(attached or {})
        unknown = sorted(set(reserved) - set(self.nodes))
        if unknown:
            raise ValueError(f"reserved_memory names NUMA node(s) {unknown} that have no memory here")
        self._default: dict[int, dict[str, tuple[int, int, int]]] = {}
        for c in capacity:
            tables: dict[str, tuple[int, int, int]] = {}
            res = reserved.get(c.node, {})
            huge_total = 0
            for name, total in sorted(c.hugepages.items()):
                tables[name] = _table(c.node, name, total, res.get(name, 0))
                huge_total += total
            tables[MEMORY] = _table(c.node, MEMORY, c.memory, res.get(MEMORY, 0), huge_total)
            extra = sorted(set(res) - set(tables))
            if extra:
                raise ValueError(f"reserved_memory for NUMA node {c.node}: no {extra} on that node")
            self._default[c.node] = tables
        self._machine_cache: tuple[MemoryState, Machine] | None = None

    # -- machine state ------------------------------------------------------------------------
    def machine(self, state: MemoryState) -> Machine:
        """Per-node tables after replaying every block in admission order (cached per state)."""
        cached = self._machine_cache
        if cached is not None and (cached[0] is state or (
                len(cached[0].blocks) == len(state.blocks)
                and list(cached[0].blocks.items()) == list(state.blocks.items()))):
            return cached[1]  # same blocks in the same order replay to the same tables (the engine
            # rebuilds MemoryState from its checkpoint form often)
        machine: Machine = {
            n: NodeState({k: Table(*v) for k, v in t.items()}, (n,)) for n, t in self._default.items()}
        for blocks in state.blocks.values():
            for b in blocks:
                _take(machine, b.numa, b.type, b.size)
        self._machine_cache = (state, machine)
        return machine

    def expand(self, nodes: Sequence[int]) -> tuple[int, ...]:
        """``nodes`` plus the memory-only nodes attached to them (for ``cpuset.mems``)."""
        chosen = set(nodes)
        return tuple(sorted(chosen | {m for m, host in self.attached.items() if host in chosen}))

    # -- hints --------------------------------------------------------------------------------
    def hints(self, state: MemoryState, pod: str, container: str,
              requests: Mapping[str, int]) -> dict[str, Sequence[TopologyHint]] | None:
        """``GetTopologyHints`` for a Guaranteed container (None: nothing requested)."""
        requests = {k: v for k, v in requests.items() if v > 0}
        if not requests:
            return None
        blocks = state.get(pod, container)
        if blocks is not None:
            return _regenerate(blocks, requests)
        return self.calculate_hints(self.machine(state), requests, state.reusable(pod))

    def calculate_hints(self, machine: Machine, requests: Mapping[str, int],
                        reuse: Mapping[tuple[tuple[int, ...], str], int] | None = None,
                        ) -> dict[str, Sequence[TopologyHint]]:
        """The kubelet's ``calculateHints``, as an implicit list (see ``memorymanager.hints``).

        ``reuse``: the pod's reusable init-container memory per (nodes, type); it counts as free
        on exactly those nodes, which init blocks make used nodes (never the unused pool)."""
        reuse = reuse or {}
        nodes = self.nodes
        alloc = {r: {n: _alloc(machine[n], r) for n in nodes} for r in requests}
        unused = [n for n in nodes if machine[n].assignments == 0]
        free = {r: {n: _free(machine[n], r) for n in unused} for r in requests}
        extras: set[int] = set()
        for n in nodes:
            node = machine[n]
            if node.assignments == 0:
                continue
            group = node.cells if len(node.cells) > 1 else (n,)
            mask = mask_of(group)
            if mask in extras or any(machine[m].cells != node.cells for m in group if m in machine):
                continue
            if all(sum(_alloc(machine[m], r) for m in group) >= need and
                   sum(_free(machine[m], r) for m in group) + reuse.get((group, r), 0) >= need
                   for r, need in requests.items()):
                extras.add(mask)
        hints = MemoryHints(nodes, mask_of(unused), free, requests, frozenset(extras),
                            min_affinity(nodes, alloc, requests))
        return {r: hints for r in requests}

    # -- allocation ---------------------------------------------------------------------------
    def allocate(self, state: MemoryState, pod: str, container: str, requests: Mapping[str, int],
                 hint: TopologyHint | None, *, init: bool = False) -> MemoryState:
        """The kubelet's ``Allocate``: returns the state with this container's blocks.

        ``init``: a regular (not restartable) init container, whose blocks later containers of
        the pod reuse: memory reused on the same nodes is not taken again, and the init blocks
        shrink by it (``updateInitContainersMemoryBlocks``), so the blocks always sum to what is held."""
        requests = {k: v for k, v in requests.items() if v > 0}
        if not requests:
            return state
        state = state.for_pod(pod)
        if state.get(pod, container) is not None:
            return state.with_source(pod, container) if init else state
        reuse = state.reusable(pod)
        machine = self.machine(state)
        best = hint if hint is not None else TopologyHint(None, False)
        if best.affinity is None:
            default = self._best_own_hint(machine, requests, None, reuse)
            if default is None:
                raise MemoryAllocationError("failed to get the default NUMA affinity, no NUMA nodes with "
                                            "enough memory is available")
            if not default.preferred and best.preferred:
                raise MemoryAllocationError("failed to find the default preferred hint")
            best = default
        assert best.affinity is not None
        if not _satisfies(machine, best.affinity, requests):
            extended = self._best_own_hint(machine, requests, best.affinity, reuse)
            if extended is None:
                raise MemoryAllocationError("failed to find NUMA nodes to extend the current topology hint "
                                            f"{nodes_of(best.affinity)}")
            if not extended.preferred and best.preferred:
                raise MemoryAllocationError("failed to find the extended preferred hint")
            best = extended
        assert best.affinity is not None
        bits = tuple(nodes_of(best.affinity))
        if _violates(machine, bits):
            raise MemoryAllocationError(f"NUMA nodes {list(bits)} would mix single- and cross-NUMA "
                                        "memory allocations (preferred hint violates NUMA node allocation)")
        for kind, size in sorted(requests.items()):
            reused = min(size, reuse.get((bits, kind), 0))
            if reused:
                state = state.reuse(pod, bits, kind, reused)
        state = state.with_blocks(pod, container, tuple(Block(bits, r, size) for r, size in sorted(requests.items())))
        return state.with_source(pod, container) if init else state

    def remove(self, state: MemoryState, pod: str, container: str) -> MemoryState:
        return state.without(pod, container)

    def _best_own_hint(self, machine: Machine, requests: Mapping[str, int], within: int | None,
                       reuse: Mapping[tuple[tuple[int, ...], str], int]) -> TopologyHint | None:
        hints = self.calculate_hints(machine, requests, reuse)
        key = MEMORY if MEMORY in hints else sorted(hints)[0]
        source = hints[key]
        if isinstance(source, MemoryHints):  # always, from calculate_hints: no walk of 2^N masks
            return source.best_holding(within or 0)
        best: TopologyHint | None = None
        for h in source:
            assert h.affinity is not None
            if within is not None and h.affinity & within != within:
                continue
            if best is None or (h.preferred and not best.preferred) or (
                    h.preferred == best.preferred and is_narrower_than(h.affinity, best.affinity or 0)):
                best = h
        return best


def _table(node: int, name: str, total: int, reserved: int, hugepages: int = 0) -> tuple[int, int, int]:
    allocatable = total - reserved - hugepages
    if allocatable < 0:
        raise ValueError(f"reserved_memory for NUMA node {node}: {name} reserve {reserved} exceeds "
                         f"what the node has ({total - hugepages} bytes)")
    return total, reserved, allocatable


def _free(node: NodeState, resource: str) -> int:
    t = node.tables.get(resource)
    return t.free if t is not None else 0


def _alloc(node: NodeState, resource: str) -> int:
    t = node.tables.get(resource)
    return t.allocatable if t is not None else 0


def _satisfies(machine: Machine, mask: int, requests: Mapping[str, int]) -> bool:
    bits = nodes_of(mask)
    return all(sum(_free(machine[n], r) for n in bits if n in machine) >= need for r, need in requests.items())


def _violates(machine: Machine, bits: tuple[int, ...]) -> bool:
    """``isAffinityViolatingNUMAAllocations``."""
    if len(bits) == 1:
        return False
    for n in bits:
        node = machine[n]
        if node.assignments == 0:
            continue
        if len(node.cells) == 1 or node.cells != bits:
            return True
    return False


def _take(machine: Machine, bits: tuple[int, ...], resource: str, size: int) -> None:
    """``updateMachineState``: count the assignment on every node, fill free memory in node order."""
    for n in bits:
        node = machine.get(n)
        if node is None:
            continue
        node.assignments += 1
        node.cells = bits
        if size == 0:
            continue
        table = node.tables.get(resource)
        if table is None or table.free <= 0:
            continue
        used = min(size, table.free)
        table.reserved += used
        size -= used


def _regenerate(blocks: Sequence[Block], requests: Mapping[str, int]) -> dict[str, Sequence[TopologyHint]] | None:
    """``regenerateHints``: a container that already holds memory gets its own blocks back as hints."""
    if len(blocks) != len(requests):
        return None
    out: dict[str, Sequence[TopologyHint]] = {}
    for b in blocks:
        if requests.get(b.type) != b.size:
            return None
        out[b.type] = (TopologyHint(mask_of(b.numa), True),)
    return out
