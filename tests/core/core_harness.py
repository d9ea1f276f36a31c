"""Core test harness: a `NodeCore` driven with events, the test playing the edge.

No socket, no thread, no sleep: the test hands the core one event at a time and carries out the
effects itself — answers a `WriteCgroups` with `CgroupsWritten` (each write succeeding, failing or
untold, as the test says), fires the timers the core armed, collects the `Resolve`s of parked
replies. `Edge.cgroups` is what the cgroups hold after the passes the test answered.

Messages are shaped as the kubelet + containerd put them into NRI (tests/service/svc_harness.py):
the pod's cgroup parent per QoS class (`/kubepods[/burstable|/besteffort]/pod<uid>`; a pod outside
kubepods is not a kubelet pod), cpu shares from the request, quota/period from the limit.

Dual-socket fixture: 12 CPUs, 2 NUMA nodes (node 0 the even CPUs, node 1 the odd ones), core
c = {c, c+6}, CPU 0 reserved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nri_pinner.config import Settings, from_mapping
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import Topology
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CpusetUpdate, CreateReply, UpdatesReply
from nri_pinner.service.app import build_engine
from nri_pinner.service.core import events as ev
from nri_pinner.service.core.effects import ArmTimer, Effect, Expedite, Park, Resolve, WriteCgroups, WriteCheckpoint
from nri_pinner.service.core.node import NodeCore, Outcome
from nri_pinner.service.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
DUAL_SOCKET = REPO / "tests" / "fixtures" / "sysfs" / "dual-socket-ht"
PERIOD = 100_000
SETTLE, SETTLE_WIDEN = ("settle", 0.002), ("settle-widen", 0.1)


# ------------------------------------------------------------------------------------------- messages

def pod(name: str, qos: str = "guaranteed", *, uid: str | None = None) -> api.PodSandbox:
    """A kubelet pod (cgroup parent under kubepods), or with qos="plain" a pod of a plain containerd
    client (no kubepods parent: not a kubelet pod)."""
    uid = uid or f"uid-{name}"
    parent = {"guaranteed": f"/kubepods/pod{uid}", "burstable": f"/kubepods/burstable/pod{uid}",
              "besteffort": f"/kubepods/besteffort/pod{uid}", "plain": f"/plain/{name}"}[qos]
    p = api.PodSandbox(id=f"sb-{name}", name=name, uid=uid, namespace="default")
    p.linux.cgroup_parent = parent
    return p


def container(sandbox: api.PodSandbox, name: str, request_milli: int = 0, limit_milli: int = 0, *,
              cpus: str = "", mems: str = "", state: int = api.CONTAINER_RUNNING) -> api.Container:
    """A container as containerd reports it (``cpus``/``mems``: its record's cpuset, for Synchronize)."""
    cid = f"{sandbox.name}-{name}"
    c = api.Container(id=cid, pod_sandbox_id=sandbox.id, name=name, state=state)  # type: ignore[arg-type]
    cpu = c.linux.resources.cpu
    cpu.shares.value = max(2, request_milli * 1024 // 1000)  # kubelet MilliCPUToShares
    if limit_milli:
        cpu.quota.value = limit_milli * PERIOD // 1000
        cpu.period.value = PERIOD
    if cpus:
        cpu.cpus = cpus
    if mems:
        cpu.mems = mems
    c.linux.cgroups_path = f"{sandbox.linux.cgroup_parent}/{cid}"
    return c


def create(sandbox: api.PodSandbox, c: api.Container) -> ev.CreateContainer:
    return ev.CreateContainer(api.CreateContainerRequest(pod=sandbox, container=c))


def resize(sandbox: api.PodSandbox, c: api.Container, milli: int, limit: int | None = None) -> ev.UpdateContainer:
    """The kubelet's UpdateContainerResources as containerd relays it (shares and quota set)."""
    req = api.UpdateContainerRequest(pod=sandbox, container=c)
    cpu = req.linux_resources.cpu
    cpu.shares.value = max(2, milli * 1024 // 1000)
    limit = milli if limit is None else limit
    if limit:
        cpu.quota.value, cpu.period.value = limit * PERIOD // 1000, PERIOD
    return ev.UpdateContainer(req)


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


def mems_for(topology: Topology, cpus: CPUSet) -> str:
    """The NUMA nodes holding ``cpus``, as cpuset.mems text (from sysfs, not from the engine)."""
    return ",".join(str(n) for n in topology.numa_nodes if topology.numa_cpus[n] & cpus)


# ------------------------------------------------------------------------------------------- the edge

def of_type(effects: Sequence[Effect], kind: type[Any]) -> list[Any]:
    return [e for e in effects if isinstance(e, kind)]


def passes(outcome: Outcome) -> list[WriteCgroups]:
    return of_type(outcome.effects, WriteCgroups)


def timers(outcome: Outcome) -> list[tuple[str, float]]:
    return [(t.name, t.seconds) for t in of_type(outcome.effects, ArmTimer)]


def settle_timers(outcome: Outcome) -> list[tuple[str, float]]:
    return [t for t in timers(outcome) if not t[0].startswith("wait:")]


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


def park_token(reply: object) -> int:
    assert isinstance(reply, Park), f"not parked: {reply!r}"
    return reply.token


@dataclass
class Edge:
    """Plays the plugin adapter for a core: keeps the timers it armed, the pass in flight and what
    each cgroup holds."""

    core: NodeCore
    topology: Topology
    armed: dict[str, float] = field(default_factory=dict)
    in_flight: list[WriteCgroups] = field(default_factory=list)
    history: list[WriteCgroups] = field(default_factory=list)  # every pass the core dispatched
    cgroups: dict[str, CPUSet] = field(default_factory=dict)  # container id -> cpuset.cpus written
    resolves: dict[int, object] = field(default_factory=dict)  # every parked reply answered so far

    def handle(self, event: ev.Event) -> Outcome:
        outcome = self.core.handle(event)
        for effect in outcome.effects:
            if isinstance(effect, ArmTimer):
                self.armed[effect.name] = effect.seconds
            elif isinstance(effect, WriteCgroups):
                assert not self.in_flight, "a second pass while one is in flight"
                self.in_flight.append(effect)
                self.history.append(effect)
            elif isinstance(effect, Resolve):
                assert effect.token not in self.resolves, f"token {effect.token} resolved twice"
                self.resolves[effect.token] = effect.reply
                self.armed.pop(f"wait:{effect.token}", None)  # answered: its wait limit is moot
        return outcome

    def fire(self, name: str) -> Outcome:
        assert name in self.armed, f"timer {name!r} not armed (armed: {sorted(self.armed)})"
        del self.armed[name]
        return self.handle(ev.TimerFired(name))

    def write(self, errors: Mapping[str, str] | None = None, untold: Mapping[str, str] | None = None) -> Outcome:
        """Answer the pass in flight: every item written, but those in ``errors`` (failed) and
        ``untold`` (written, systemd refused the scope's properties)."""
        assert len(self.in_flight) == 1, "no pass in flight"
        p = self.in_flight.pop()
        errors, untold = errors or {}, untold or {}
        results = []
        for item in p.items:
            err = errors.get(item.container_id, "")
            if not err:
                self.cgroups[item.container_id] = item.cpus
            results.append(ev.WriteResult(item.container_id, item.cpus, item.mems, error=err,
                                          untold=untold.get(item.container_id, "")))
        return self.handle(ev.CgroupsWritten(p.pass_id, results))

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

    @property
    def pool(self) -> CPUSet:
        return self.core.node.shared_pool


def make_core(settings: Settings | None = None, *, cgroup_writes: bool = True,
              prior: Mapping[str, Any] | None = None, synchronized: bool = True) -> Edge:
    """A core on the dual-socket fixture, configured (containerd's 2 s request timeout) and, unless
    told otherwise, synchronized with an empty node."""
    settings = settings or make_settings()
    topology = discover(settings.sysfs_root)
    engine, _nics = build_engine(settings, topology)
    edge = Edge(NodeCore(settings, engine, Metrics(), prior=prior, cgroup_writes=cgroup_writes), topology)
    edge.handle(ev.Configured(2000))
    if synchronized:
        out = edge.handle(ev.Synchronize([], []))
        assert isinstance(out.reply, UpdatesReply), out.reply
        edge.settle()
    return edge
