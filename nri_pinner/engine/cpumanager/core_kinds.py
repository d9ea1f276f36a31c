"""Keep one exclusive allocation on one core kind (hybrid CPUs: Intel P/E cores, ARM big.LITTLE).

The kubelet does not know core kinds; a container pinned to 2 P-cores and 2 E-cores runs at
the E-cores' pace in lock-step workloads. ``cpu_manager.core_kinds`` chooses:

* ``mixed``: ignore kinds (the kubelet's behaviour).
* ``prefer-same`` (default): allocate from the fastest kind that can hold the whole request;
  if none can, allocate across kinds and log it.
* ``strict``: never mix; a request no single kind can hold fails with InsufficientCPUs.

Pure: picks the pool to allocate from; the topology-aware take happens afterwards.
"""

from __future__ import annotations

import logging

from ..cpuset import CPUSet
from ..errors import InsufficientCPUs
from ..topology.model import Topology

log = logging.getLogger(__name__)

MODES = ("mixed", "prefer-same", "strict")
DEFAULT = "prefer-same"


def _speed(kind: str) -> tuple[int, int]:
    """Fastest first: P/big, then mid-<capacity> by capacity, then E/little."""
    if kind in ("P", "big"):
        return (0, 0)
    if kind.startswith("mid-") and kind[4:].isdigit():
        return (1, -int(kind[4:]))
    return (2, 0)


def pool_for(topology: Topology, available: CPUSet, n: int, mode: str = DEFAULT) -> CPUSet:
    """The CPUs of ``available`` an exclusive request for ``n`` CPUs may use under ``mode``."""
    if mode not in MODES:
        raise ValueError(f"core_kinds must be one of {MODES}, got {mode!r}")
    kinds = topology.kind_cpus
    if mode == "mixed" or not kinds or n <= 0:
        return available
    for kind in sorted(kinds, key=lambda k: (_speed(k), k)):
        pool = available & kinds[kind]
        if len(pool) >= n:
            return pool
    best = max(len(available & cpus) for cpus in kinds.values())
    if mode == "strict":
        raise InsufficientCPUs(n, best, f"no single core kind has {n} free CPUs (at most {best}; "
                                        "cpu_manager.core_kinds = \"strict\")")
    log.warning("exclusive request for %d CPUs mixes core kinds: no single kind has that many free", n)
    return available
