"""NUMA affinity masks, topology hints and the hint-provider interface.

A NUMA mask is a plain ``int``: bit *n* set means NUMA node *n*. The ordering
helpers follow the kubelet's ``bitmask`` package exactly, because the merge's
tie-breaks (and so which NUMA nodes a container lands on) depend on them.

Providers (CPU today; devices and NICs later) answer a :class:`HintRequest`
with ``{resource: hints}``. ``None`` for the whole answer or for one resource
means "no preference"; an *empty* list means "cannot be satisfied anywhere".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..cpuset import EMPTY, CPUSet

# -- masks ---------------------------------------------------------------


def mask_of(nodes: Iterable[int]) -> int:
    """The mask with exactly these NUMA nodes set."""
    mask = 0
    for node in nodes:
        if not isinstance(node, int) or isinstance(node, bool) or node < 0:
            raise ValueError(f"NUMA node ids must be non-negative integers, got {node!r}")
        mask |= 1 << node
    return mask


def nodes_of(mask: int) -> list[int]:
    """NUMA node ids set in ``mask``, ascending."""
    out: list[int] = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def masks_of_size(nodes: list[int], k: int) -> Iterator[int]:
    """The k-subsets of ``nodes`` (ascending node ids) as masks, in ascending mask order
    (Gosper's hack over positions; k = 0 gives the empty mask)."""
    n = len(nodes)
    if k < 0 or k > n:
        return
    if k == 0:
        yield 0
        return
    v = (1 << k) - 1
    while v < 1 << n:
        yield sum(1 << nodes[i] for i in nodes_of(v))
        low = v & -v
        ripple = v + low
        v = (((ripple ^ v) >> 2) // low) | ripple


def count(mask: int) -> int:
    """Number of NUMA nodes in ``mask``."""
    return mask.bit_count()


def is_narrower_than(a: int, b: int) -> bool:
    """Kubelet ``IsNarrowerThan``: fewer nodes, or as many and a smaller integer value.

    "Smaller integer" is the kubelet's tie-break: the mask whose highest
    differing node is lower wins, so {0,3} is *not* narrower than {1,2}.
    """
    ca, cb = a.bit_count(), b.bit_count()
    return ca < cb or (ca == cb and a < b)


def format_mask(mask: int | None) -> str:
    """``{0,2}`` style, ``any`` for ``None``."""
    if mask is None:
        return "any"
    return "{" + ",".join(map(str, nodes_of(mask))) + "}"


# -- hints ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopologyHint:
    """A NUMA placement a provider can satisfy; ``affinity=None`` means any node."""

    affinity: int | None
    preferred: bool

    def __post_init__(self) -> None:
        if self.affinity is not None and (
            not isinstance(self.affinity, int) or isinstance(self.affinity, bool) or self.affinity <= 0
        ):
            raise ValueError(f"hint affinity must be a non-empty NUMA mask or None, got {self.affinity!r}")
        if not isinstance(self.preferred, bool):
            raise ValueError(f"hint 'preferred' must be a bool, got {self.preferred!r}")

    def __str__(self) -> str:
        return f"{format_mask(self.affinity)}{'' if self.preferred else ' (not preferred)'}"


ResourceHints = Mapping[str, Sequence[TopologyHint] | None]
"""One provider's answer: hints per resource name (``None`` = no preference)."""


@dataclass(frozen=True)
class HintRequest:
    """What one admission asks the providers about.

    ``container`` is ``None`` for pod scope; then ``exclusive_cpus`` is the
    pod-level count (the kubelet's ``max(max(init), sum(app))``).
    ``allocated_cpus`` is set when the container (or pod) already holds CPUs,
    e.g. after a restart: the CPU provider then regenerates hints from them.
    ``static_hints`` are hints given verbatim (``simulate`` per-op ``hints``).
    ``allocation_conflict`` marks a re-admission whose held CPUs do not match its request:
    the kubelet then gives the empty CPU hint list (rejected unless best-effort).
    """

    pod_uid: str
    container: str | None = None
    exclusive_cpus: int = 0
    reusable_cpus: CPUSet = EMPTY
    allocated_cpus: CPUSet | None = None
    static_hints: ResourceHints = field(default_factory=dict)
    allocation_conflict: bool = False

    def __post_init__(self) -> None:
        if self.exclusive_cpus < 0:
            raise ValueError(f"exclusive_cpus must be >= 0, got {self.exclusive_cpus}")


@runtime_checkable
class HintProvider(Protocol):
    """Anything that turns a request into NUMA hints (CPU, devices, NICs, memory)."""

    @property
    def name(self) -> str: ...

    def hints(self, request: HintRequest) -> ResourceHints | None:
        """``None`` (or ``{}``) = no preference for any resource."""
        ...


class StaticHintProvider:
    """Returns the hints carried in the request itself (``request.static_hints``)."""

    name = "static"

    def hints(self, request: HintRequest) -> ResourceHints | None:
        return request.static_hints or None


def parse_static_hints(data: Mapping[str, Any]) -> dict[str, tuple[TopologyHint, ...] | None]:
    """Parse ``{"vendor.com/gpu": [{"numa": [0], "preferred": true}, ...]}``.

    A resource mapped to ``null`` has no preference; an entry without ``numa``
    (or ``"numa": null``) is an any-node hint; ``preferred`` defaults to true.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"hints must be an object of resource -> list, got {type(data).__name__}")
    out: dict[str, tuple[TopologyHint, ...] | None] = {}
    for resource, entries in data.items():
        if entries is None:
            out[str(resource)] = None
            continue
        if not isinstance(entries, list):
            raise ValueError(f"hints for {resource!r} must be a list, got {type(entries).__name__}")
        parsed: list[TopologyHint] = []
        for i, entry in enumerate(entries):
            where = f"hints[{resource!r}][{i}]"
            if not isinstance(entry, Mapping):
                raise ValueError(f"{where} must be an object like {{\"numa\": [0], \"preferred\": true}}")
            unknown = set(entry) - {"numa", "preferred"}
            if unknown:
                raise ValueError(f"{where} has unknown key(s) {sorted(unknown)}")
            numa = entry.get("numa")
            preferred = entry.get("preferred", True)
            if not isinstance(preferred, bool):
                raise ValueError(f"{where}.preferred must be true or false, got {preferred!r}")
            if numa is None:
                parsed.append(TopologyHint(None, preferred))
                continue
            if not isinstance(numa, list) or not numa:
                raise ValueError(f"{where}.numa must be a non-empty list of NUMA node ids or null")
            try:
                parsed.append(TopologyHint(mask_of(numa), preferred))
            except ValueError as exc:
                raise ValueError(f"{where}.numa: {exc}") from exc
        out[str(resource)] = tuple(parsed)
    return out
