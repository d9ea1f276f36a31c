"""Core test harness: a `NodeCore` driven with events, the test playing the edge.

No socket, no thread, no sleep: the test hands the core one event at a time and carries out the
effects itself — answers a `WriteCgroups` with `CgroupsWritten` (each write succeeding, failing or
untold, as the test says), fires the timers the core armed, collects the `Resolve`s of parked
replies. `Edge.cgroups` is what the cgroups hold after the passes the test answered.

Messages are shaped as the kubelet + containerd put them into NRI (testkit/pod_builders.py, shared
with tests/service/svc_harness.py): the pod's cgroup parent per QoS class
(`/kubepods[/burstable|/besteffort]/pod<uid>`; a pod outside kubepods is not a kubelet pod), cpu
shares from the request, quota/period from the limit.

Dual-socket fixture: 12 CPUs, 2 NUMA nodes (node 0 the even CPUs, node 1 the odd ones), core
c = {c, c+6}, CPU 0 reserved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nri_pinner.config import Settings, from_mapping
from nri_pinner.core import events as ev
from nri_pinner.core.checkpoint import Snapshot
from nri_pinner.core.effects import (
    ArmTimer,
    Count,
    Effect,
    Expedite,
    Park,
    Resolve,
    Timed,
    WriteCgroups,
    WriteCheckpoint,
)
from nri_pinner.core.node import NodeCore, Outcome
from nri_pinner.edge.app import build_engine
from nri_pinner.edge.observe.core_measures import carry_out, timed
from nri_pinner.edge.observe.metrics import Metrics
from nri_pinner.edge.observe.status_server import status_document
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import Topology
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CpusetUpdate, CreateReply, UpdatesReply
from testkit.pod_builders import PERIOD, container, exited, kubelet_container, mems_for, pod, resize_request

__all__ = ["PERIOD", "container", "exited", "kubelet_container", "mems_for", "pod"]

REPO = Path(__file__).resolve().parents[2]
DUAL_SOCKET = REPO / "tests" / "fixtures" / "sysfs" / "dual-socket-ht"
SETTLE, SETTLE_WIDEN = ("settle", 0.002), ("settle-widen", 0.1)


# ------------------------------------------------------------------------------------------- messages

def create(sandbox: api.PodSandbox, c: api.Container) -> ev.CreateContainer:
    return ev.CreateContainer(api.CreateContainerRequest(pod=sandbox, container=c))


def resize(sandbox: api.PodSandbox, c: api.Container, milli: int, limit: int | None = None) -> ev.UpdateContainer:
    """The kubelet's UpdateContainerResources as containerd relays it (shares and quota set)."""
    return ev.UpdateContainer(resize_request(c, sandbox, milli, limit))


# ------------------------------------------------------------------------------------------- settings

def make_settings(sysfs: Path = DUAL_SOCKET, **sections: Mapping[str, Any]) -> Settings:
    """Settings for a core: the paths name nothing (the core opens none of them)."""
    data: dict[str, Any] = {
        "sysfs_root": str(sysfs),
        "cpu_manager": {"reserved_cpus": "0"},
        "nri": {"socket": "/nonexistent/nri.sock"},
        "state": {"checkpoint": "/nonexistent/cp.json"},
        "inspect": {"socket": "/nonexistent/inspect.sock"},
        "reconcile": {"period_seconds": 0, "cri_socket": "", "cgroup_root": "/nonexistent/cgroup"},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return from_mapping(data, "<core test>")


# ------------------------------------------------------------------------------------------- the edge

def of_type(effects: Sequence[Effect], kind: type[Any]) -> list[Any]:
    return [e for e in effects if isinstance(e, kind)]


def passes(outcome: Outcome) -> list[WriteCgroups]:
    return of_type(outcome.effects, WriteCgroups)


def timers(outcome: Outcome) -> list[tuple[str, float]]:
    return [(t.name, t.seconds) for t in of_type(outcome.effects, ArmTimer)]


def settle_timers(outcome: Outcome) -> list[tuple[str, float]]:
    """The settle timers armed, by kind (each one's own name is ``<kind>#<n>``: core/passes.py)."""
    return [(name.partition("#")[0], s) for name, s in timers(outcome) if not name.startswith("wait:")]


def resolved(outcome: Outcome) -> dict[int, object]:
    return {r.token: r.reply for r in of_type(outcome.effects, Resolve)}


def expedited(outcome: Outcome) -> list[int]:
    return [e.pass_id for e in of_type(outcome.effects, Expedite)]


def checkpointed(outcome: Outcome) -> bool:
    return bool(of_type(outcome.effects, WriteCheckpoint))


def updates_of(reply: object) -> dict[str, CpusetUpdate]:
    """container id -> the update a reply carries for it (one at most)."""
    assert isinstance(reply, CreateReply | UpdatesReply), reply
    out: dict[str, CpusetUpdate] = {}
    for u in reply.updates:
        assert u.container_id not in out, f"two updates for {u.container_id} in one reply"
        out[u.container_id] = u
    return out


def cpus_of(reply: object) -> CPUSet:
    """The cpuset a create's reply gives the container."""
    assert isinstance(reply, CreateReply), reply
    return CPUSet.parse(reply.cpus)


def park_token(reply: object) -> int:
    assert isinstance(reply, Park), f"not parked: {reply!r}"
    return reply.token


@dataclass
class Edge:
    """Plays the plugin adapter for a core: keeps the timers it armed, the pass in flight and what
    each cgroup holds."""

    core: NodeCore
    topology: Topology
    metrics: Metrics  # where the core's `Count`s and `Timed`s are carried out, as the plugin does
    armed: dict[str, float] = field(default_factory=dict)
    in_flight: list[WriteCgroups] = field(default_factory=list)
    history: list[WriteCgroups] = field(default_factory=list)  # every pass the core dispatched
    cgroups: dict[str, CPUSet] = field(default_factory=dict)  # container id -> cpuset.cpus written
    resolves: dict[int, object] = field(default_factory=dict)  # every parked reply answered so far
    snapshot: Snapshot | None = None  # the newest checkpoint the core asked for
    no_cgroups: bool = False  # no container has a cgroup to write (no runc ran them): every write fails
    # pod key -> how often a pass removed its cgroup's CFS quota (the cgroup held the kubelet's each time)
    pod_quotas: dict[str, int] = field(default_factory=dict)
    # pod key -> the CFS quota a pass put back into its cgroup (the newest)
    restored: dict[str, int] = field(default_factory=dict)

    def handle(self, event: ev.Event) -> Outcome:
        outcome, seconds = timed(self.core, event)  # as the plugin does: stamped, and the core's time measured
        for effect in outcome.effects:
            if isinstance(effect, Count | Timed):
                carry_out(self.metrics, effect, seconds)
            elif isinstance(effect, ArmTimer):
                self.armed[effect.name] = effect.seconds
            elif isinstance(effect, WriteCgroups):
                assert not self.in_flight, "a second pass while one is in flight"
                self.in_flight.append(effect)
                self.history.append(effect)
            elif isinstance(effect, Resolve):
                assert effect.token not in self.resolves, f"token {effect.token} resolved twice"
                self.resolves[effect.token] = effect.reply
                self.armed.pop(f"wait:{effect.token}", None)  # answered: its wait limit is moot
            elif isinstance(effect, WriteCheckpoint):
                self.snapshot = effect.snapshot
        return outcome

    def settles(self) -> list[tuple[str, float]]:
        """The settle timers armed and not fired, by kind."""
        return [(n.partition("#")[0], s) for n, s in self.armed.items() if n.startswith("settle")]

    def fire(self, name: str) -> Outcome:
        """Fire a timer by its name, or a settle timer by its kind (``settle``: the one armed)."""
        if name not in self.armed:
            named = [n for n in self.armed if n.partition("#")[0] == name]
            name = named[0] if len(named) == 1 else name
        assert name in self.armed, f"timer {name!r} not armed (armed: {sorted(self.armed)})"
        del self.armed[name]
        return self.handle(ev.TimerFired(name))

    def write(self, errors: Mapping[str, str] | None = None, untold: Mapping[str, str] | None = None) -> Outcome:
        """Answer the pass in flight: every item written, but those in ``errors`` (failed) and
        ``untold`` (written, systemd refused the scope's properties). Pod quotas (keyed by pod key in
        ``errors``/``untold`` too) are removed from a cgroup that held the kubelet's, or put back into
        one that held none."""
        assert len(self.in_flight) == 1, "no pass in flight"
        p = self.in_flight.pop()
        errors, untold = errors or {}, untold or {}
        results = []
        for item in p.items:
            err = errors.get(item.container_id, "ENOENT: no cgroup" if self.no_cgroups else "")
            if not err:
                self.cgroups[item.container_id] = item.cpus
            results.append(ev.WriteResult(item.container_id, item.cpus, item.mems, error=err,
                                          untold=untold.get(item.container_id, "")))
        quotas = []
        for q in p.quotas:
            err = errors.get(q.pod_key, "")
            if not err and q.quota is not None:
                self.restored[q.pod_key] = q.quota
            elif not err:
                self.pod_quotas[q.pod_key] = self.pod_quotas.get(q.pod_key, 0) + 1
            before = "" if err else "100000" if q.quota is None else "-1"
            quotas.append(ev.PodQuotaResult(q.pod_key, q.name, before=before, error=err,
                                            untold=untold.get(q.pod_key, ""), quota=q.quota))
        return self.handle(ev.CgroupsWritten(p.pass_id, results, quotas))

    def settle(self) -> None:
        """Run the edge until the core wants nothing more: answer passes (all succeed), fire settle
        timers (never a reply's wait limit)."""
        for _ in range(100):
            if self.in_flight:
                self.write()
                continue
            due = [name for name in self.armed if not name.startswith("wait:")]
            if not due:
                return
            self.fire(due[0])
        raise AssertionError("the core never settles")

    def run(self, sandbox: api.PodSandbox, c: api.Container) -> CPUSet:
        """Create and start ``c``, its cgroup holding what the create answered, and settle; its cpuset."""
        reply = self.handle(create(sandbox, c)).reply
        assert isinstance(reply, CreateReply), reply
        cpus = CPUSet.parse(reply.cpus)
        self.cgroups[c.id] = cpus  # the runtime creates its cgroup with the reply's set
        self.handle(ev.StartContainer(c.id))
        self.settle()
        return cpus

    def sync(self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container],
             cgroups: ev.CgroupReads | None = None) -> UpdatesReply:
        """Synchronize with the runtime's view (``cgroups``: what their cgroups hold; none read by
        default, as for containers whose cgroup files are absent) and settle; the reply."""
        reply: object = self.handle(ev.Synchronize(pods, containers, cgroups or {})).reply
        if isinstance(reply, Park):
            self.settle()
            reply = self.resolves[reply.token]
        assert isinstance(reply, UpdatesReply), reply
        return reply

    @property
    def pool(self) -> CPUSet:
        return self.core.node.shared_pool

    # -- what the edge shows of the core: the checkpoint body, the status document, the metrics ----
    def body(self) -> dict[str, Any]:
        """The newest checkpoint body (what the checkpoint file would hold)."""
        assert self.snapshot is not None, "no checkpoint written"
        return self.snapshot.body()

    def entries(self) -> dict[str, dict[str, Any]]:
        """container id -> its entry in the newest checkpoint body."""
        return {e["container_id"]: e for e in self.body()["entries"]}

    def document(self) -> dict[str, Any]:
        """The status document (what `nri-pinner status` shows) of the core's published view."""
        view = self.core.node.published
        assert view is not None
        return status_document(view, None)

    def assignments(self) -> dict[str, dict[str, Any]]:
        return {a["container_id"]: a for a in self.document()["assignments"]}

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        value = self.metrics.registry.get_sample_value(name, dict(labels or {}))
        return 0.0 if value is None else float(value)


def make_core(settings: Settings | None = None, *, cgroup_writes: bool = True,
              prior: Mapping[str, Any] | None = None, synchronized: bool = True,
              request_timeout_ms: int = 2000) -> Edge:
    """A core on the dual-socket fixture, configured (containerd's 2 s request timeout unless told
    otherwise) and, unless told otherwise, synchronized with an empty node. ``prior``: the checkpoint
    body a restarted plugin read (`Edge.body()` of the run before)."""
    settings = settings or make_settings()
    topology = discover(settings.sysfs_root)
    engine, _nics = build_engine(settings, topology)
    metrics = Metrics()
    edge = Edge(NodeCore(settings, engine, prior=prior, cgroup_writes=cgroup_writes), topology, metrics)
    edge.handle(ev.Configured(request_timeout_ms))
    if synchronized:
        out = edge.handle(ev.Synchronize([], []))
        assert isinstance(out.reply, UpdatesReply), out.reply
        edge.settle()
    return edge
