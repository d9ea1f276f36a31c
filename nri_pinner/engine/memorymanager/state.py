"""Memory Manager state: the blocks each Guaranteed container holds, and the machine state they imply.

Only the blocks are stored (and checkpointed): the per-node tables (free, reserved, groups)
are replayed from them in admission order, the way the kubelet's ``validateState`` rebuilds
its expected machine state. That keeps the checkpoint small and never inconsistent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MEMORY = "memory"
Key = tuple[str, str]


def hugepage_resource(page_bytes: int) -> str:
    """The kubelet's resource name for a hugepage size: ``hugepages-2Mi``, ``hugepages-1Gi``."""
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if page_bytes % size == 0:
            return f"hugepages-{page_bytes // size}{unit}"
    return f"hugepages-{page_bytes}"


@dataclass(frozen=True, slots=True)
class Block:
    """``size`` bytes of ``type`` (memory or a hugepage resource) spread over ``numa``."""

    numa: tuple[int, ...]
    type: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"numa": list(self.numa), "type": self.type, "size": self.size}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Block:
        numa, kind, size = data.get("numa"), data.get("type"), data.get("size")
        if (not isinstance(numa, list) or not numa or not all(isinstance(n, int) and n >= 0 for n in numa)
                or not isinstance(kind, str) or not isinstance(size, int) or size < 0):
            raise ValueError(f"bad memory block {dict(data)}")
        return cls(tuple(sorted(numa)), kind, size)


@dataclass
class Table:
    """One resource on one node (bytes)."""

    total: int
    system_reserved: int
    allocatable: int
    reserved: int = 0

    @property
    def free(self) -> int:
        return self.allocatable - self.reserved


@dataclass
class NodeState:
    tables: dict[str, Table]
    cells: tuple[int, ...]
    assignments: int = 0


Machine = dict[int, NodeState]


@dataclass(frozen=True)
class MemoryState:
    """Blocks per (pod, container), in admission order.

    ``sources``: regular init containers whose blocks later containers of the same pod reuse
    (the kubelet's ``initContainersReusableMemory``). Like that map it covers one pod at a time
    and is not checkpointed: after a restart a re-admitted init container becomes a source again.
    """

    blocks: Mapping[Key, tuple[Block, ...]] = field(default_factory=dict)
    sources: frozenset[Key] = frozenset()

    def get(self, pod: str, container: str) -> tuple[Block, ...] | None:
        return self.blocks.get((pod, container))

    def with_blocks(self, pod: str, container: str, blocks: tuple[Block, ...]) -> MemoryState:
        out = dict(self.blocks)
        out.pop((pod, container), None)
        out[(pod, container)] = blocks
        return MemoryState(out, self.sources)

    def without(self, pod: str, container: str) -> MemoryState:
        if (pod, container) not in self.blocks:
            return self
        out = dict(self.blocks)
        del out[(pod, container)]
        return MemoryState(out, self.sources - {(pod, container)})

    # -- init-container memory reuse (kubelet v1.32 policy_static.go) -------------------------
    def reusable(self, pod: str) -> dict[tuple[tuple[int, ...], str], int]:
        """Bytes of ``pod``'s init-container blocks later containers may reuse, per (nodes, type).

        The kubelet keeps a running figure (an init container raises it to at least its block,
        any other container lowers it by its block) and shrinks the init blocks by what is reused;
        that figure always equals the sum of the (shrunk) init blocks, so it is derived here.
        """
        out: dict[tuple[tuple[int, ...], str], int] = {}
        for key in self.blocks:
            if key in self.sources and key[0] == pod:
                for b in self.blocks[key]:
                    out[(b.numa, b.type)] = out.get((b.numa, b.type), 0) + b.size
        return out

    def for_pod(self, pod: str) -> MemoryState:
        """The kubelet forgets other pods' reusable memory whenever a container is allocated."""
        kept = frozenset(k for k in self.sources if k[0] == pod)
        return self if kept == self.sources else MemoryState(self.blocks, kept)

    def with_source(self, pod: str, container: str) -> MemoryState:
        return MemoryState(self.blocks, self.sources | {(pod, container)})

    def without_sources(self, keys: frozenset[Key]) -> MemoryState:
        return MemoryState(self.blocks, self.sources - keys) if self.sources & keys else self

    def reuse(self, pod: str, numa: tuple[int, ...], kind: str, size: int) -> MemoryState:
        """``updateInitContainersMemoryBlocks``: ``size`` bytes reused from the pod's init blocks on
        exactly ``numa``, taken from the earliest admitted first."""
        out = dict(self.blocks)
        for key, blocks in self.blocks.items():
            if size <= 0:
                break
            if key not in self.sources or key[0] != pod:
                continue
            changed = []
            for b in blocks:
                if size > 0 and b.size > 0 and b.type == kind and b.numa == numa:
                    taken = min(size, b.size)
                    size -= taken
                    b = Block(b.numa, b.type, b.size - taken)
                changed.append(b)
            out[key] = tuple(changed)
        return MemoryState(out, self.sources)

    def to_json(self) -> list[dict[str, Any]]:
        return self.to_list()

    def to_list(self) -> list[dict[str, Any]]:
        return [{"pod": p, "container": c, "blocks": [b.to_dict() for b in bs]}
                for (p, c), bs in self.blocks.items()]

    @classmethod
    def from_list(cls, data: Any) -> MemoryState:
        if data is None:
            return cls()
        if not isinstance(data, list):
            raise ValueError("memory state must be a list of {pod, container, blocks}")
        out: dict[Key, tuple[Block, ...]] = {}
        for entry in data:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("blocks"), list):
                raise ValueError(f"bad memory state entry {entry!r}")
            key = (str(entry.get("pod")), str(entry.get("container")))
            if key in out:
                raise ValueError(f"container {key[1]!r} of pod {key[0]!r} listed twice in memory state")
            out[key] = tuple(Block.from_dict(b) for b in entry["blocks"])
        return cls(out)
