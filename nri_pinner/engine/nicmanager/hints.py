"""NIC topology hints by the kubelet device manager's rule (``generateDeviceTopologyHints``).

A pod's NICs are already attached when its containers are admitted, so the "request" is all of them
and the "available devices" are exactly them: a NUMA mask is a hint when it holds every NIC's node
(the kubelet counts devices whose node is in the mask and wants at least the request), and it is
preferred when it has the fewest nodes any hint can have — which is exactly the NICs' own nodes.
NICs with no NUMA affinity, or on a node the topology does not have, are left out (the kubelet
gives "no topology" devices no hints either); a pod with none of those has no preference.

On N NUMA nodes there are 2^(N - |NIC nodes|) such masks (32,768 on 16 nodes: ~2 MB, ~30 ms to
build); lists are cached per (nodes, NIC mask), since every pod behind the same NIC asks the same
question, and the cache is small to bound that memory.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache

from ..topologymanager.hints import HintRequest, ResourceHints, TopologyHint, mask_of

RESOURCE = "nics"


def nic_hints(numa_nodes: Sequence[int], nic_nodes: Iterable[int]) -> tuple[TopologyHint, ...] | None:
    """Every mask over ``numa_nodes`` holding all of ``nic_nodes``; ``None`` = no preference."""
    known = frozenset(numa_nodes)
    wanted = frozenset(n for n in nic_nodes if n in known)
    if not wanted:
        return None
    return _hints(tuple(sorted(known)), mask_of(wanted))


@lru_cache(maxsize=32)
def _hints(nodes: tuple[int, ...], required: int) -> tuple[TopologyHint, ...]:
    others = [1 << n for n in nodes if not required >> n & 1]
    out = [TopologyHint(required, True)]
    for size in range(1, len(others) + 1):  # the kubelet's order: by size, then combination order
        for extra in itertools.combinations(others, size):
            out.append(_non_preferred(required | sum(extra)))
    return tuple(out)


def _non_preferred(mask: int) -> TopologyHint:
    # valid by construction (a non-empty mask): skip the checks, 2^15 hints on 16 NUMA nodes add up
    hint: TopologyHint = object.__new__(TopologyHint)
    object.__setattr__(hint, "affinity", mask)
    object.__setattr__(hint, "preferred", False)
    return hint


NicSource = Callable[[str], Sequence[int] | None]
"""pod key -> the NUMA node of each of its NICs (``None``: not known, no preference)."""


class NicHintProvider:
    """Hints for containers that get exclusive CPUs (the rest run on the shared pool wherever it is)."""

    name = "nics"

    def __init__(self, numa_nodes: Sequence[int], source: NicSource) -> None:
        self.numa_nodes = tuple(numa_nodes)
        self.source = source

    def hints(self, request: HintRequest) -> ResourceHints | None:
        if request.exclusive_cpus == 0 and request.allocated_cpus is None:
            return None
        nodes = self.source(request.pod_uid)
        if not nodes:
            return None
        hints = nic_hints(self.numa_nodes, nodes)
        return None if hints is None else {RESOURCE: hints}


class NicTable:
    """A fixed pod -> NIC NUMA nodes table (``simulate``, tests, benchmarks)."""

    def __init__(self, table: Mapping[str, Sequence[int]] | None = None) -> None:
        self.table: dict[str, tuple[int, ...]] = {k: tuple(v) for k, v in (table or {}).items()}

    def __call__(self, pod: str) -> tuple[int, ...] | None:
        return self.table.get(pod)

    def set(self, pod: str, nodes: Iterable[int]) -> None:
        self.table[pod] = tuple(nodes)
