"""The static policy's options (the kubelet's ``cpuManagerPolicyOptions``): parsing and the
combinations the kubelet refuses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import PolicyOptionError
from ..topology.model import Topology
from .releases import DEFAULT_RELEASE, PARTIAL_UNCORE_ODD_SMT, check_release, follows

OPTION_NAMES = {
    "full-pcpus-only": "full_pcpus_only",
    "distribute-cpus-across-numa": "distribute_cpus_across_numa",
    "align-by-socket": "align_by_socket",
    "distribute-cpus-across-cores": "distribute_cpus_across_cores",
    "strict-cpu-reservation": "strict_cpu_reservation",
    "prefer-align-cpus-by-uncorecache": "prefer_align_cpus_by_uncorecache",
    "prefer-isolated-cpus": "prefer_isolated_cpus",
}
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


@dataclass(frozen=True)
class StaticPolicyOptions:
    full_pcpus_only: bool = False
    distribute_cpus_across_numa: bool = False
    align_by_socket: bool = False
    distribute_cpus_across_cores: bool = False
    strict_cpu_reservation: bool = False
    prefer_align_cpus_by_uncorecache: bool = False
    prefer_isolated_cpus: bool = False
    # The kubelet release whose placements the allocator follows (releases.py; not an option of the
    # kubelet's: its cpu_manager.kubelet_version setting).
    kubelet_release: str = DEFAULT_RELEASE

    def __post_init__(self) -> None:
        try:  # refused at construction: every allocation path reads it, the reservation's first
            check_release(self.kubelet_release)
        except ValueError as exc:
            raise PolicyOptionError(str(exc)) from None

    @property
    def odd_smt_partial_uncore(self) -> bool:
        """The partial-uncore step of kubelet 1.34+ (kubernetes#131850), else v1.32's."""
        return follows(self.kubelet_release, PARTIAL_UNCORE_ODD_SMT)

    @classmethod
    def from_mapping(cls, options: Mapping[str, str]) -> StaticPolicyOptions:
        """Parse kubelet-style ``cpuManagerPolicyOptions`` ({"full-pcpus-only": "true", ...})."""
        values: dict[str, Any] = {}  # bool flags; Any as the class has a str field too
        for name, raw in options.items():
            if name not in OPTION_NAMES:
                raise PolicyOptionError(
                    f"unknown CPU manager policy option {name!r} (known: {', '.join(sorted(OPTION_NAMES))})"
                )
            if raw not in _TRUE | _FALSE:
                raise PolicyOptionError(f"bad value {raw!r} for policy option {name!r}: want true or false")
            values[OPTION_NAMES[name]] = raw in _TRUE
        return cls(**values)

    def validate(self, topology: Topology, topology_policy_name: str = "none") -> None:
        """Refuse the combinations the kubelet refuses (``PolicyOptionError``)."""
        pairs = [
            ("full_pcpus_only", "distribute_cpus_across_cores"),
            ("distribute_cpus_across_numa", "distribute_cpus_across_cores"),
            ("prefer_align_cpus_by_uncorecache", "distribute_cpus_across_cores"),
            ("prefer_align_cpus_by_uncorecache", "distribute_cpus_across_numa"),
        ]
        dashed = {v: k for k, v in OPTION_NAMES.items()}
        for a, b in pairs:
            if getattr(self, a) and getattr(self, b):
                raise PolicyOptionError(
                    f"static policy options {dashed[a]} and {dashed[b]} can not be used at the same time"
                )
        if self.align_by_socket:
            if topology_policy_name == "single-numa-node":
                raise PolicyOptionError(
                    "topology manager policy single-numa-node is incompatible with "
                    "CPU manager policy option align-by-socket"
                )
            if len(topology.sockets) > len(topology.numa_nodes):
                raise PolicyOptionError(
                    f"align-by-socket is not compatible with hardware where sockets "
                    f"({len(topology.sockets)}) outnumber NUMA nodes "
                    f"({len(topology.numa_nodes)})"
                )
