"""What an admission is asked (``AdmissionRequest``) and what it answers (``Decision``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from .cpuset import CPUSet
from .devicemanager.hints import Device
from .qos import QoS
from .topologymanager.hints import ResourceHints, TopologyHint, nodes_of


@dataclass(frozen=True)
class AdmissionRequest:
    pod: str
    container: str
    qos: QoS | str  # any spelling QoS.parse accepts; stored as QoS
    cpu_request_milli: int = 0
    cpu_limit_milli: int = 0
    init: bool = False
    restartable: bool = False
    hints: ResourceHints = field(default_factory=dict)  # from other resources (devices, simulate)
    pod_exclusive_cpus: int | None = None  # pod scope: the pod's total; default: this container's
    devices: Mapping[str, Sequence[Device]] = field(default_factory=dict)  # resource -> devices it holds
    memory: Mapping[str, int] = field(default_factory=dict)  # "memory"/"hugepages-<size>" -> bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "qos", QoS.parse(self.qos))


class AdmissionExtras(TypedDict, total=False):
    """What a container brings beyond its CPUs, read from its NRI data at the edge: the
    `AdmissionRequest` fields of the same names (absent: none)."""

    devices: Mapping[str, Sequence[Device]]  # resource -> its PCI devices with their NUMA nodes
    memory: Mapping[str, int]  # a Guaranteed container's memory and hugepage limits (bytes)


@dataclass(frozen=True)
class Decision:
    pod: str
    container: str
    admitted: bool
    exclusive: bool
    cpus: CPUSet  # the container's cpuset: its exclusive CPUs or the shared pool; empty when rejected
    mems: tuple[int, ...]  # NUMA nodes for cpuset.mems
    shared: CPUSet  # the shared pool after this decision
    hint: TopologyHint | None = None  # merged hint (None when the topology manager is off)
    reason: str = ""
    message: str = ""
    provider_hints: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # provider -> resource -> hints
    blamed: tuple[str, ...] = ()  # providers a rejection is on

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pod": self.pod, "container": self.container, "admitted": self.admitted,
            "exclusive": self.exclusive, "cpus": str(self.cpus), "mems": ",".join(map(str, self.mems)),
            "shared": str(self.shared),
            "hint": None if self.hint is None else {
                "numa": None if self.hint.affinity is None else nodes_of(self.hint.affinity),
                "preferred": self.hint.preferred},
        }
        if not self.admitted:
            out["reason"], out["message"] = self.reason, self.message
        return out

    def explain(self, *, lazy: bool = False) -> dict[str, Any]:
        """Each provider's hints (and, for a rejection, the providers it is on) for ``status``;
        ``lazy``: the hints as the decision holds them, formatted when first read (JSON them with
        ``default=dict``)."""
        out: dict[str, Any] = {}
        if self.provider_hints:
            out["provider_hints"] = (self.provider_hints if lazy else
                                     {k: dict(v) for k, v in self.provider_hints.items()})
        if self.blamed:
            out["blamed"] = list(self.blamed)
        return out
