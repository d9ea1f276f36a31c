"""Explicit, serialisable engine state: the shared pool plus one record per container.

Treated as immutable: the policy never changes a state it was given, it returns a new
one (``replace_*`` helpers copy the dicts). A failed admission therefore changes
nothing, and the service can checkpoint any state with ``to_dict``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..cpuset import EMPTY, CPUSet
from ..topologymanager.hints import TopologyHint, mask_of, nodes_of

STATE_VERSION = 1

Key = tuple[str, str]  # (pod uid, container name)


class _Keep:
    """``with_changes``: leave ``reuse_pod`` as it is (None is a value there)."""


KEEP = _Keep()


@dataclass(frozen=True, slots=True)
class Assignment:
    """One container's CPUs.

    ``admitted`` is the set it was admitted with, ``current`` the set it has now (they
    differ only after an in-place resize). Shared (non-exclusive) containers have empty
    sets: they follow the shared pool. ``numa_affinity`` is the NUMA bitmask it was
    admitted with (bit n = NUMA node n), or None without a topology hint.
    """

    pod: str
    container: str
    admitted: CPUSet
    current: CPUSet
    exclusive: bool
    init: bool = False
    restartable: bool = False
    numa_affinity: int | None = None

    @property
    def key(self) -> Key:
        return (self.pod, self.container)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "container": self.container,
            "admitted": str(self.admitted),
            "current": str(self.current),
            "exclusive": self.exclusive,
            "init": self.init,
            "restartable": self.restartable,
            "numa_affinity": self.numa_affinity,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Assignment:
        try:
            affinity = data.get("numa_affinity")
            if affinity is not None and (not isinstance(affinity, int) or affinity <= 0):
                raise ValueError(f"numa_affinity must be a positive bitmask or null, got {affinity!r}")
            return cls(
                pod=str(data["pod"]),
                container=str(data["container"]),
                admitted=CPUSet.parse(str(data["admitted"])),
                current=CPUSet.parse(str(data["current"])),
                exclusive=bool(data["exclusive"]),
                init=bool(data.get("init", False)),
                restartable=bool(data.get("restartable", False)),
                numa_affinity=affinity,
            )
        except KeyError as exc:
            raise ValueError(f"assignment entry {dict(data)} lacks {exc}") from exc


@dataclass(frozen=True)
class PodBlock:
    """A pod's CPU block under topology-manager pod scope with the kubelet 1.36 alpha gate
    `PodLevelResourceManagers` (cpumanager/pod_level.py `allocate_pod`): out of the shared pool from
    the pod's admission until its last record goes. ``cpus``: each container's CPUs (an exclusive
    slice, the block less the sidecars' slices for a regular shared init container, else the pod
    pool); ``exclusive``: the containers holding a slice of their own."""

    block: CPUSet
    cpus: Mapping[str, CPUSet]
    exclusive: frozenset[str]
    pod_pool: CPUSet

    def to_dict(self) -> dict[str, Any]:
        return {"block": str(self.block), "cpus": {n: str(c) for n, c in sorted(self.cpus.items())},
                "exclusive": sorted(self.exclusive), "pod_pool": str(self.pod_pool)}

    @classmethod
    def from_dict(cls, data: Any) -> PodBlock:
        if not isinstance(data, Mapping) or not isinstance(data.get("cpus"), Mapping):
            raise ValueError(f"pod block must be an object with block, cpus, exclusive, pod_pool, got {data!r}")
        return cls(CPUSet.parse(str(data["block"])), {str(n): CPUSet.parse(str(c)) for n, c in data["cpus"].items()},
                   frozenset(str(n) for n in data.get("exclusive") or ()), CPUSet.parse(str(data["pod_pool"])))


@dataclass(frozen=True)
class EngineState:
    """Shared pool (``default_set``), assignments keyed by (pod, container), and per-pod reusable CPUs.

    ``reusable[pod]`` is the kubelet's ``cpusToReuse[pod]`` as ``updateCPUsToReuse`` keeps it (an
    init container's CPUs added, an app container's or sidecar's taken out, nothing dropped when a
    container goes), for every pod rather than only the last one: ``reuse_pod`` is the pod whose
    exclusive allocation ran last, the only pod the kubelet keeps an entry for. What an admission
    may reuse is ``StaticPolicy.reusable``.

    ``pod_hints[pod]`` (topology manager scope ``pod``): the best hint of the pod's one merge, which
    every later container of the pod is admitted with, as the kubelet hands one hint to all of a pod's
    containers (v1.32 topologymanager/scope_pod.go:48, :55-57); dropped with the pod's last record.
    """

    default_set: CPUSet = EMPTY
    assignments: Mapping[Key, Assignment] = field(default_factory=dict)
    reusable: Mapping[str, CPUSet] = field(default_factory=dict)
    # Other resource managers' state by name ("memory"): objects with ``to_json()`` or plain JSON.
    providers: Mapping[str, Any] = field(default_factory=dict)
    reuse_pod: str | None = field(default=None, kw_only=True)
    # union of exclusive CPUs, carried from state to state (None = not known yet, computed on demand)
    exclusive_mask: int | None = field(default=None, compare=False, repr=False, kw_only=True)
    pod_hints: Mapping[str, TopologyHint] = field(default_factory=dict, kw_only=True)
    pod_blocks: Mapping[str, PodBlock] = field(default_factory=dict, kw_only=True)  # pod -> its PodBlock

    # -- queries -------------------------------------------------------------------------------
    def get(self, pod: str, container: str) -> Assignment | None:
        return self.assignments.get((pod, container))

    def exclusive_cpus(self) -> CPUSet:
        """Union of every exclusive container's current CPUs (kept incrementally by `with_changes`,
        so an admission does not scan every assignment on the node)."""
        mask = self.exclusive_mask
        if mask is None:
            mask = 0
            for a in self.assignments.values():
                if a.exclusive:
                    mask |= a.current.mask
            object.__setattr__(self, "exclusive_mask", mask)
        return CPUSet.from_mask(mask)

    def pod_assignments(self, pod: str) -> list[Assignment]:
        return [a for a in self.assignments.values() if a.pod == pod]

    # -- copy-on-write updates -------------------------------------------------------------------
    def with_changes(
        self,
        *,
        default_set: CPUSet | None = None,
        put: Assignment | None = None,
        drop: Key | None = None,
        reusable: Mapping[str, CPUSet] | None = None,
        reuse_pod: str | _Keep | None = KEEP,
    ) -> EngineState:
        assignments = dict(self.assignments)
        mask = self.exclusive_mask
        for gone in (assignments.pop(drop, None) if drop is not None else None,
                     assignments.get(put.key) if put is not None else None):
            if gone is not None and gone.exclusive:
                mask = None  # its CPUs may be another's too (never by design): recount on demand
        if put is not None:
            assignments[put.key] = put
            if mask is not None and put.exclusive:
                mask |= put.current.mask
        return EngineState(
            default_set=self.default_set if default_set is None else default_set,
            assignments=assignments,
            reusable=dict(self.reusable if reusable is None else reusable),
            providers=self.providers,
            exclusive_mask=mask,
            reuse_pod=self.reuse_pod if isinstance(reuse_pod, _Keep) else reuse_pod,
            pod_hints=self.pod_hints,
            pod_blocks=self.pod_blocks,
        )

    def with_reusable_recomputed(self) -> EngineState:
        """``reusable`` recomputed from the records (rebuild: it is not checkpointed): per pod, the CPUs
        of regular init containers no other exclusive container of the pod holds."""
        init: dict[str, int] = {}
        other: dict[str, int] = {}
        for a in self.assignments.values():
            if a.exclusive:
                into = init if a.init and not a.restartable else other
                into[a.pod] = into.get(a.pod, 0) | a.current.mask
        reusable = {pod: CPUSet.from_mask(mask & ~other.get(pod, 0)) for pod, mask in init.items()
                    if mask & ~other.get(pod, 0)}
        return self.with_changes(reusable=reusable, reuse_pod=None)

    def with_shared(self, records: Mapping[Key, Assignment]) -> EngineState:
        """A copy with many new shared (non-exclusive) records in one dict copy (rebuild: thousands of
        shared containers, one copy instead of one each). Keys already held keep their record, as a
        second admission of the same container would."""
        if not records:
            return self
        assignments = {**records, **self.assignments}
        if any(a.exclusive for a in records.values()):
            raise ValueError("with_shared takes shared records only")
        return EngineState(self.default_set, assignments, self.reusable, self.providers,
                           exclusive_mask=self.exclusive_mask, reuse_pod=self.reuse_pod, pod_hints=self.pod_hints,
                           pod_blocks=self.pod_blocks)

    def with_provider(self, name: str, value: Any) -> EngineState:
        """A copy with one resource manager's state replaced (CPU state shared, it is immutable)."""
        return EngineState(self.default_set, self.assignments, self.reusable, {**self.providers, name: value},
                           exclusive_mask=self.exclusive_mask, reuse_pod=self.reuse_pod, pod_hints=self.pod_hints,
                           pod_blocks=self.pod_blocks)

    def with_pod_hint(self, pod: str, hint: TopologyHint | None) -> EngineState:
        """A copy with the pod's hint set, or forgotten (None)."""
        hints = {p: h for p, h in self.pod_hints.items() if p != pod}
        if hint is not None:
            hints[pod] = hint
        return EngineState(self.default_set, self.assignments, self.reusable, self.providers,
                           exclusive_mask=self.exclusive_mask, reuse_pod=self.reuse_pod, pod_hints=hints,
                           pod_blocks=self.pod_blocks)

    def with_pod_block(self, pod: str, block: PodBlock | None, default_set: CPUSet) -> EngineState:
        """A copy with the pod's block recorded (or forgotten: None) and the shared pool given."""
        blocks = {p: b for p, b in self.pod_blocks.items() if p != pod}
        if block is not None:
            blocks[pod] = block
        return EngineState(default_set, self.assignments, self.reusable, self.providers,
                           exclusive_mask=self.exclusive_mask, reuse_pod=self.reuse_pod, pod_hints=self.pod_hints,
                           pod_blocks=blocks)

    # -- serialisation ---------------------------------------------------------------------------
    def hold(self, a: Assignment) -> EngineState:
        """Record ``a`` with its current CPUs taken out of the shared pool (allocation, restore, repair)."""
        return self.with_changes(default_set=self.default_set - a.current, put=a)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "default_set": str(self.default_set),
            "assignments": [a.to_dict() for _, a in sorted(self.assignments.items())],
            "reusable": {pod: str(cpus) for pod, cpus in sorted(self.reusable.items()) if cpus},
            **({"reuse_pod": self.reuse_pod} if self.reuse_pod is not None else {}),
            **({"pod_hints": {pod: {"numa": None if h.affinity is None else nodes_of(h.affinity),
                                    "preferred": h.preferred} for pod, h in sorted(self.pod_hints.items())}}
               if self.pod_hints else {}),
            **({"pod_blocks": {pod: b.to_dict() for pod, b in sorted(self.pod_blocks.items())}}
               if self.pod_blocks else {}),
            **({"providers": {k: v.to_json() if hasattr(v, "to_json") else v
                              for k, v in sorted(self.providers.items())}} if self.providers else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EngineState:
        version = data.get("version")
        if version != STATE_VERSION:
            raise ValueError(f"unsupported engine state version {version!r} (expected {STATE_VERSION})")
        assignments: dict[Key, Assignment] = {}
        for entry in data.get("assignments") or []:
            a = Assignment.from_dict(entry)
            if a.key in assignments:
                raise ValueError(f"container {a.container!r} of pod {a.pod!r} listed twice in engine state")
            assignments[a.key] = a
        reusable = {str(pod): CPUSet.parse(str(cpus)) for pod, cpus in (data.get("reusable") or {}).items()}
        reuse_pod = data.get("reuse_pod")
        return cls(
            default_set=CPUSet.parse(str(data.get("default_set", ""))),
            assignments=assignments,
            reusable=reusable,
            providers=dict(data.get("providers") or {}),
            reuse_pod=None if reuse_pod is None else str(reuse_pod),
            pod_hints={str(pod): _hint_from_dict(h) for pod, h in (data.get("pod_hints") or {}).items()},
            pod_blocks={str(pod): PodBlock.from_dict(b) for pod, b in (data.get("pod_blocks") or {}).items()},
        )


def _hint_from_dict(data: Any) -> TopologyHint:
    if not isinstance(data, Mapping):
        raise ValueError(f"pod hint must be an object like {{\"numa\": [0], \"preferred\": true}}, got {data!r}")
    numa = data.get("numa")
    if numa is not None and (not isinstance(numa, list) or not numa):
        raise ValueError(f"pod hint numa must be a non-empty list of NUMA node ids or null, got {numa!r}")
    return TopologyHint(None if numa is None else mask_of(numa), data.get("preferred", True))
