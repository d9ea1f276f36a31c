"""Errors the engine reports, each with a short machine-readable ``reason``.

``reason`` is what the service puts in its output (and what the kubelet would put in
a pod's admission failure), ``message`` is the human explanation.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base of every engine error: a ``reason`` token plus a ``message``."""

    reason: str = "EngineError"

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason

    def __str__(self) -> str:
        return self.message


class AdmissionError(EngineError):
    """A container cannot be admitted (the kubelet would fail the pod)."""

    reason = "AdmissionError"


class SMTAlignmentError(AdmissionError):
    """full-pcpus-only refused a request (the kubelet's ``SMTAlignmentError``)."""

    reason = "SMTAlignmentError"

    def __init__(
        self,
        requested_cpus: int,
        cpus_per_core: int,
        available_physical_cpus: int = 0,
        caused_by_physical_cpus: bool = False,
    ) -> None:
        self.requested_cpus = requested_cpus
        self.cpus_per_core = cpus_per_core
        self.available_physical_cpus = available_physical_cpus
        self.caused_by_physical_cpus = caused_by_physical_cpus
        if caused_by_physical_cpus:
            msg = (
                "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = "
                f"{available_physical_cpus}, requested CPUs = {requested_cpus}, "
                f"CPUs per core = {cpus_per_core}"
            )
        else:
            msg = (f"SMT Alignment Error: requested {requested_cpus} cpus not multiple cpus per core = "
                   f"{cpus_per_core}")
        super().__init__(msg)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SMTAlignmentError) and (
            (
                self.requested_cpus,
                self.cpus_per_core,
                self.available_physical_cpus,
                self.caused_by_physical_cpus,
            )
            == (
                other.requested_cpus,
                other.cpus_per_core,
                other.available_physical_cpus,
                other.caused_by_physical_cpus,
            )
        )

    def __hash__(self) -> int:
        return hash((self.requested_cpus, self.cpus_per_core, self.available_physical_cpus))


class InsufficientCPUs(AdmissionError):
    """Fewer CPUs are available than requested."""

    reason = "InsufficientCPUs"

    def __init__(self, requested: int, available: int, message: str | None = None) -> None:
        self.requested = requested
        self.available = available
        super().__init__(
            message
            or (f"not enough cpus available to satisfy request: requested={requested}, available={available}")
        )


class TopologyAffinityError(AdmissionError):
    """The topology merge found no acceptable NUMA placement (kubelet's ``TopologyAffinityError``)."""

    reason = "TopologyAffinityError"

    def __init__(self, message: str = "Resources cannot be allocated with Topology locality") -> None:
        super().__init__(message)


class PolicyOptionError(EngineError, ValueError):
    """A configuration the kubelet would refuse to start with (bad option combination, bad reserved set)."""

    reason = "PolicyOptionError"
