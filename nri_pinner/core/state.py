"""The node's state as the core holds it: engine state, the per-container records (`ContainerRecord`),
what the runtime (or the container's cgroup) was last told about each container (`NodeState.told`, as
the kubelet's lastUpdateState), and what the core's rules keep between events (the checkpoint's hints,
its holds, the containers waiting to be pinned, the stopped sandboxes, the drift repairs a pass writes).

One writer: the node core (core/node.py) and the rules it hands the state to (core/context.py), on the
node thread; no lock. After each change the core `publish()`es an immutable `View`; inspection, metrics
and the fallbacks on the wire loop read the newest view without any lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..engine.admission_engine import Decision, Engine
from ..engine.cpumanager.state import Assignment, EngineState
from ..engine.cpuset import CPUSet
from ..engine.topologymanager.explain import HintSummaries
from .intent import ContainerIntent

if TYPE_CHECKING:
    from .repairs import DriftBatch

K = TypeVar("K", str, tuple[str, str])


@dataclass
class ContainerRecord:
    """One runtime container we manage (keyed by container id)."""

    container_id: str
    sandbox_id: str
    intent: ContainerIntent
    cgroups_path: str = ""
    stopped: bool = False
    exit_code: int = 0  # at its stop (NRI v0.10+ runtimes report it; older ones always say 0)
    # StartContainer seen (or running at Synchronize): it has a cgroup to write and to check for drift
    started: bool = False
    hints: dict[str, Any] = field(default_factory=dict)  # merged hint + each provider's, from admission
    last_resize: dict[str, Any] | None = None  # the newest in-place resize's result (status), replaced whole
    # the generation of the change that gave this container its CPUs (create, a resize before start):
    # its StartContainer waits for a pass begun there or later (0: the newest generation)
    start_after: int = 0
    # its CFS quota (µs) as the runtime last reported it: the create's, an adoption's (Synchronize), the
    # newest resize's; 0 = none (the kubelet's cpuCFSQuota: false), -1 = unlimited (core/quotas.py)
    cfs_quota: int = 0
    # a reply of ours set its quota to -1 (it held exclusive CPUs) and no kubelet resize sent one since:
    # the runtime's record holds -1, so once it is not exclusive its updates carry `cfs_quota` back
    quota_removed: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.intent.pod_key, self.intent.container)


class Containers(dict[str, ContainerRecord]):
    """Container id -> ContainerRecord, indexed by pod and by (pod, container name) as well, so that
    per-event lookups (the pod's other containers, a restarted container's old record) cost the
    same on an empty node and a full one, and in a small pod and a big one."""

    def __init__(self, items: dict[str, ContainerRecord] | None = None) -> None:
        super().__init__()
        self.by_pod: dict[str, dict[str, ContainerRecord]] = {}
        self._by_key: dict[tuple[str, str], dict[str, ContainerRecord]] = {}
        for cid, t in (items or {}).items():
            self[cid] = t

    def __setitem__(self, cid: str, t: ContainerRecord) -> None:
        old = self.get(cid)
        if old is not None:
            self._unindex(cid, old)
        super().__setitem__(cid, t)
        self.by_pod.setdefault(t.key[0], {})[cid] = t
        self._by_key.setdefault(t.key, {})[cid] = t

    def __delitem__(self, cid: str) -> None:
        t = self[cid]
        super().__delitem__(cid)
        self._unindex(cid, t)

    def pop(self, cid: str, default: ContainerRecord | None = None) -> ContainerRecord | None:  # type: ignore[override]
        t = self.get(cid)
        if t is None:
            return default
        del self[cid]
        return t

    def in_pod(self, pod_key: str) -> list[ContainerRecord]:
        return list(self.by_pod.get(pod_key, {}).values())

    def with_key(self, key: tuple[str, str]) -> list[ContainerRecord]:
        """The records of one pod's container name (two while a restarted container replaces one)."""
        return list(self._by_key.get(key, {}).values())

    def _unindex(self, cid: str, t: ContainerRecord) -> None:
        _drop(self.by_pod, t.key[0], cid)
        _drop(self._by_key, t.key, cid)


def _drop(index: dict[K, dict[str, ContainerRecord]], k: K, cid: str) -> None:
    entries = index.get(k)
    if entries is not None:
        entries.pop(cid, None)
        if not entries:
            del index[k]


@dataclass(frozen=True)
class View:
    """What inspection reads: the engine and state of one moment, and that moment's containers.
    The `ContainerRecord` records are shared; the fields a view reads (ids, intent, stopped) are only
    ever replaced whole, so a reader sees either the old or the new value."""

    engine: Engine
    state: EngineState
    containers: dict[str, ContainerRecord]
    decisions: tuple[dict[str, Any], ...]
    generation: int

    @property
    def shared_pool(self) -> CPUSet:
        return shared_pool_of(self.engine, self.state)


def shared_pool_of(engine: Engine, state: EngineState) -> CPUSet:
    """Where shared containers run. With strict reservation every other CPU may be exclusive: then
    they run on the reserved CPUs rather than on no cpuset (which would mean every CPU)."""
    return engine.policy.shared_pool(state) or engine.policy.reserved


Mems = tuple[int, ...]  # cpuset.mems: NUMA node ids, ascending (the engine's type; text only on the wire)


def mems_text(mems: Mems) -> str:
    """cpuset.mems as NRI and the cgroup file take it: "0,1" ("" = leave mems alone)."""
    return ",".join(map(str, mems))


def desired_of(engine: Engine, state: EngineState, shared: CPUSet, key: tuple[str, str],
               mems_of: Callable[[CPUSet], Mems]) -> tuple[CPUSet, Mems]:
    """A container's cpuset and cpuset.mems: its exclusive CPUs or the shared pool; the Memory
    Manager's nodes win over the CPUs' nodes (``mems_of``: the nodes of CPUs, cached by the caller)."""
    a = state.get(*key)
    exclusive = a is not None and a.exclusive
    cpus = a.current if a is not None and exclusive else shared
    if a is not None and not exclusive and (block := state.pod_blocks.get(key[0])) is not None:
        cpus = block.cpus.get(key[1], block.pod_pool)  # pod scope, pod-level: its share of the pod's block
    mems = engine.memory_mems(state, *key)
    if mems is None and not exclusive and engine.mems == "all":
        mems = engine.all_mems
    if mems is not None:
        return cpus, mems
    return cpus, mems_of(cpus)


Told = tuple[CPUSet, Mems]  # (cpuset.cpus, cpuset.mems) a container was last told


@dataclass
class NodeState:
    engine: Engine
    state: EngineState
    containers: Containers = field(default_factory=Containers)
    decisions: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=64))
    generation: int = 0  # bumped after every change; a pass or repair sent across a change is re-checked
    published: View | None = None  # the newest view (None before the first publish)
    # container id -> what its cgroup or the runtime last holds from us; absent = unknown: resend
    told: dict[str, Told] = field(default_factory=dict)
    # started containers whose cgroup write failed (or systemd refused): only a reply's NRI update reaches them
    via_reply: set[str] = field(default_factory=set)
    # container id -> the cpuset the runtime's own record (containerd's stored spec) holds, as far as we
    # know (absent = unknown); runc writes it back on any later update (core/runtime_record_updates.py)
    recorded: dict[str, Told] = field(default_factory=dict)
    # the PodResources List as last delivered, for init/app roles: (namespace, pod) -> listed containers
    # (None: no List, or the kubelet's socket is absent)
    listed_pods: Mapping[tuple[str, str], frozenset[str]] | None = None
    # -- what the core's rules keep between events (core/context.py) --
    cgroup_writes: bool = True  # the edge writes cgroups (else every change goes out in replies)
    # container id -> checkpoint entry (a hint for rebuild)
    prior: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    # checkpoint holds not yet replaced by a Synchronize: container id -> (pod, container)
    seeded: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Guaranteed containers Synchronize left on the shared pool, oldest first
    waiting: list[str] = field(default_factory=list)
    stopped_sandboxes: set[str] = field(default_factory=set)  # StopPodSandbox seen, RemovePodSandbox not yet
    drift_batches: list[DriftBatch] = field(default_factory=list)  # drift repairs a pass is writing
    # cpuset.mems per (engine, cpus): every shared container asks for the same pool's
    _mems: dict[tuple[Engine, CPUSet], Mems] = field(default_factory=dict, repr=False)

    def assignment(self, t: ContainerRecord) -> Assignment | None:
        return self.state.get(*t.key)

    @property
    def shared_pool(self) -> CPUSet:
        return shared_pool_of(self.engine, self.state)

    def desired(self, t: ContainerRecord) -> Told:
        return desired_of(self.engine, self.state, self.shared_pool, t.key, self.mems_of)

    def mems_of(self, cpus: CPUSet) -> Mems:
        key = (self.engine, cpus)
        mems = self._mems.get(key)
        if mems is None:
            if len(self._mems) >= 4096:
                self._mems.clear()
            mems = self._mems[key] = self.engine.mems_of(cpus)
        return mems

    def by_key(self, key: tuple[str, str]) -> ContainerRecord | None:
        found = self.containers.with_key(key)
        return found[0] if found else None

    def record(self, decision: Decision, intent: ContainerIntent, outcome: str) -> HintSummaries | None:
        """The decision into the log; its hint summaries when they are not formatted yet (the core hands
        them to the edge to settle when idle: the core's `record`, core/node.py)."""
        # the hints stay lazy: formatted when status reads them, not before the reply
        explained = decision.explain(lazy=True)
        entry = {"container_id": intent.container_id, "namespace": intent.namespace, "pod_name": intent.pod_name,
                 "outcome": outcome, **decision.to_json(), **explained}
        self.decisions.append(entry)
        hints = decision.provider_hints
        unsettled = hints if isinstance(hints, HintSummaries) and not hints.settled else None
        t = self.containers.get(intent.container_id)
        if t is not None and decision.admitted and decision.provider_hints:
            t.hints = {"merged": entry["hint"], **explained}
        return unsettled

    def publish(self) -> View:
        """After a change: bump the generation and publish a view."""
        self.generation += 1
        view = self.published = View(self.engine, self.state, dict(self.containers), tuple(self.decisions),
                                     self.generation)
        return view

    def view(self) -> View:
        """The newest published view (publishes one first if none exists yet)."""
        return self.published if self.published is not None else self.publish()

    def drop(self, container_id: str) -> ContainerRecord | None:
        """Forget a container: its record and what it was told."""
        self.told.pop(container_id, None)
        self.recorded.pop(container_id, None)
        self.via_reply.discard(container_id)
        return self.containers.pop(container_id)

    def forget_told(self) -> None:
        """After a reply the runtime may not have applied: resend everything on the next one."""
        self.told.clear()
        self.recorded.clear()
