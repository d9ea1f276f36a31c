"""NIC topology hints by the kubelet device manager's rule (``generateDeviceTopologyHints``).

A pod's NICs are already attached when its containers are admitted, so the "request" is all of them
and the "available devices" are exactly them: a NUMA mask is a hint when it holds every NIC's node
(the kubelet counts devices whose node is in the mask and wants at least the request), and it is
preferred when it has the fewest nodes any hint can have — which is exactly the NICs' own nodes.
NICs with no NUMA affinity, or on a node the topology does not have, are left out (the kubelet
gives "no topology" devices no hints either); a pod with none of those has no preference.

On N NUMA nodes there are 2^(N - |NIC nodes|) such masks (32,768 on 16 nodes), so they are handed
to the merge implicitly (``topologymanager/upset_hints.py``), never listed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from ..topologymanager.hints import HintRequest, ResourceHints, mask_of
from ..topologymanager.upset_hints import UpSetHints

RESOURCE = "nics"


def nic_hints(numa_nodes: Sequence[int], nic_nodes: Iterable[int]) -> UpSetHints | None:
    """Every mask over ``numa_nodes`` holding all of ``nic_nodes``; ``None`` = no preference."""
    known = frozenset(numa_nodes)
    wanted = frozenset(n for n in nic_nodes if n in known)
    if not wanted:
        return None
    return UpSetHints(mask_of(known), mask_of(wanted))


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
