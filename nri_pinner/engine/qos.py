"""The one QoS vocabulary of the project: service intent, admission requests, the static policy,
the checkpoint and ``status`` all use these values."""

from __future__ import annotations

from enum import StrEnum


class QoS(StrEnum):
    GUARANTEED = "guaranteed"
    BURSTABLE = "burstable"
    BEST_EFFORT = "besteffort"
    UNMANAGED = "unmanaged"  # not a kubelet pod (no kubepods cgroup parent): the shared pool

    @classmethod
    def parse(cls, value: QoS | str) -> QoS:
        """A QoS from any common spelling: ``Guaranteed``, ``BestEffort``, ``best-effort``, ``besteffort``."""
        if isinstance(value, QoS):
            return value
        key = value.lower().replace("-", "").replace("_", "")
        try:
            return cls(key)
        except ValueError:
            expected = ", ".join(q.value for q in cls)
            raise ValueError(f"unknown QoS {value!r}; expected one of {expected}") from None
