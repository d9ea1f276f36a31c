"""Building the memory policy from discovered capacities, and its hint provider.

The Memory Manager's NUMA domain is the Topology Manager's (the CPU nodes). A memory-only
node is attached to its nearest CPU node (lowest distance, then lowest id).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..topologymanager.hints import HintRequest, ResourceHints
from .policy import NodeCapacity, StaticMemoryPolicy
from .state import MemoryState


def build_policy(cpu_nodes: Sequence[int], memory: Mapping[int, int],
                 hugepages: Mapping[int, Mapping[str, int]] | None = None,
                 reserved: Mapping[int, Mapping[str, int]] | None = None,
                 distances: Mapping[int, Mapping[int, int]] | None = None) -> StaticMemoryPolicy:
    """``memory``/``hugepages`` in bytes per node (memory-only nodes included); ``distances`` rows
    for memory-only nodes decide where they attach (default: the lowest CPU node)."""
    hugepages = hugepages or {}
    distances = distances or {}
    cpu = sorted(cpu_nodes)
    if not cpu:
        raise ValueError("memory manager needs at least one CPU NUMA node")
    missing = [n for n in cpu if n not in memory]
    if missing:
        raise ValueError(f"memory size unknown for NUMA node(s) {missing}; the memory provider needs it")
    mem = {n: memory[n] for n in cpu}
    huge: dict[int, dict[str, int]] = {n: dict(hugepages.get(n, {})) for n in cpu}
    attached: dict[int, int] = {}
    for m in sorted(set(memory) - set(cpu)):
        row = distances.get(m, {})
        host = min(cpu, key=lambda c: (row.get(c, 10 if c == m else 20), c))
        attached[m] = host
        mem[host] += memory[m]
        for name, size in hugepages.get(m, {}).items():
            huge[host][name] = huge[host].get(name, 0) + size
    return StaticMemoryPolicy([NodeCapacity(n, mem[n], huge[n]) for n in cpu], reserved, attached)


def parse_reserved_memory(text: str) -> dict[int, dict[str, int]]:
    """The kubelet's ``--reserved-memory`` form: ``0:memory=1Gi,hugepages-2Mi=64Mi;1:memory=2Gi``."""
    out: dict[int, dict[str, int]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        node_text, sep, items = part.partition(":")
        if not sep or not node_text.strip().isdigit():
            raise ValueError(f"reserved_memory entry {part!r}: expected NODE:resource=quantity[,...]")
        node = int(node_text)
        if node in out:
            raise ValueError(f"reserved_memory names NUMA node {node} twice")
        table: dict[str, int] = {}
        for item in filter(None, (i.strip() for i in items.split(","))):
            name, eq, qty = item.partition("=")
            name = name.strip()
            if not eq or not (name == "memory" or name.startswith("hugepages-")):
                raise ValueError(f"reserved_memory entry {item!r}: expected memory=Q or hugepages-<size>=Q")
            table[name] = parse_quantity(qty.strip())
        out[node] = table
    return out


_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
           "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def parse_quantity(text: str) -> int:
    """A Kubernetes byte quantity (``512Mi``, ``1G``, ``1048576``) as an integer."""
    digits = text.rstrip("kMGTi")
    suffix = text[len(digits):]
    if not digits.isdigit() or suffix not in _SUFFIX:
        raise ValueError(f"bad quantity {text!r} (want e.g. 512Mi, 1Gi, 1G or bytes)")
    return int(digits) * _SUFFIX[suffix]


class MemoryHintProvider:
    """The memory manager's hints for one Guaranteed container (bound to the state it decides on)."""

    name = "memory"

    def __init__(self, policy: StaticMemoryPolicy, state: MemoryState, pod: str, container: str,
                 requests: Mapping[str, int]) -> None:
        self.policy, self.state, self.pod, self.container, self.requests = policy, state, pod, container, requests

    def hints(self, request: HintRequest) -> ResourceHints | None:
        return self.policy.hints(self.state, self.pod, self.container, self.requests)


def memory_state(value: object) -> MemoryState:
    """The engine keeps the memory state under ``EngineState.providers["memory"]``, possibly still JSON."""
    if isinstance(value, MemoryState):
        return value
    return MemoryState.from_list(value)


def all_nodes(policy: StaticMemoryPolicy) -> tuple[int, ...]:
    return tuple(sorted(set(policy.nodes) | set(policy.attached)))


def summarize(values: Iterable[int]) -> str:
    return ",".join(map(str, sorted(values)))
