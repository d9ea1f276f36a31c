"""Drift repair and CPU hotplug in the core. The reconcile edge (`edge/watch/reconcile.py`) reads the
cgroups the core names (`list_probes`), the core decides each drift's repair (`decide_repairs`): the cgroup is
rewritten by a pass (the same ordered writes as every pool change, never beside one), or, with
cgroup writes off, the repair goes through the runtime — which the edge sends and reports back
(`runtime_repaired`). A hotplug rebuilds the engine at the edge; the core moves the state onto it.

Only started containers are checked (`ContainerRecord.started`: StartContainer seen, or running at
Synchronize). Before its start a container's cgroup is runc's, mid-making: containerd runs runc
create inside CRI StartContainer, before it tells plugins, and under the systemd driver the scope
can exist with an empty cgroup-v2 `cpuset.cpus` until runc writes it. What the create's reply (or a
later reply) gave it is what runc writes; its start wants a pass if that is stale (lifecycle.start).
Decided by the lifecycle, never by the value read: a started container's empty `cpuset.cpus`
inherits its parent's CPUs, and that is drift. Nor is a cgroup a pass wrote (or was writing) between the
probe and the decision: the read may be from either side of the write (PassPlanner.overlapped); nor,
until the probe after next, one whose NRI update a reply carried (the runtime applies it in its own time;
one it never applies is drift then)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import structlog

from ..engine.admission_engine import AdmissionRequest
from ..engine.cpuset import CPUSet
from ..engine.qos import QoS
from .effects import Park
from .events import CpusetsRead, RuntimeRepaired, TopologyChanged, WriteResult
from .qos_slices import PROBE_PREFIX
from .state import Mems

if TYPE_CHECKING:
    from .context import CoreContext, Reply

log = structlog.get_logger("nri_pinner.reconcile")


@dataclass(frozen=True)
class DriftProbe:
    container_id: str
    name: str
    cgroups_path: str


@dataclass(frozen=True)
class Drift:
    container_id: str
    name: str
    actual: CPUSet
    desired: CPUSet
    mems: Mems
    generation: int = 0  # the state generation it was decided at


@dataclass
class DriftBatch:
    token: int
    results: list[tuple[Drift, str]] = field(default_factory=list)  # (drift, "cgroup" | "runtime" | "gone")
    pending: dict[str, Drift] = field(default_factory=dict)  # container id -> drift its pass is writing


def list_probes(core: CoreContext) -> Reply:
    """The cgroups to read: those of the started containers (module doc), and the QoS slices that hold the
    pool (core/qos_slices.py)."""
    core.passes.probed()
    return [*(DriftProbe(t.container_id, t.key[1], t.cgroups_path)
              for t in core.node.containers.values() if t.started and not t.stopped and t.cgroups_path),
            *(DriftProbe(*probe) for probe in core.slices.probes())]


def decide_repairs(core: CoreContext, event: CpusetsRead) -> Reply:
    """The drifts as they stand now (events since the probe may have changed a desired set or removed
    the container), each with how it is repaired; parked while a pass writes the cgroup ones."""
    node = core.node
    batch = DriftBatch(0)
    slices = core.slices
    retry = slices.due()  # a slice not confirmed since its last pass: its pass is tried again now
    for cid, actual in event.actual.items():
        if cid in core.passes.overlapped:
            # read while a pass wrote it: the value may be older or newer than what the core knows of it
            # (a slice narrowed before its pass reported back is no drift); its next read decides
            continue
        if cid.startswith(PROBE_PREFIX):
            retry = slices.drifted(cid, actual) or retry
            continue
        t = node.containers.get(cid)
        # whatever the edge read: a container not started (a Synchronize since the probe may have
        # replaced its record) is no drift (module doc)
        if t is None or t.stopped or not t.started:
            continue
        desired, mems = slices.own(t)
        if actual == desired:
            continue
        d = Drift(cid, t.key[1], actual, desired, mems, node.generation)
        if core.node.cgroup_writes:
            node.told.pop(cid, None)  # unknown: the next pass writes it
            batch.pending[cid] = d
        else:
            batch.results.append((d, "runtime"))
    if retry and not batch.pending:
        node.publish()  # a new generation: the pass it asks for is due
        core.passes.want(node.generation)
    if not batch.pending:
        return batch.results
    node.publish()
    core.passes.want(node.generation)
    batch.token = core.passes.new_token()
    core.node.drift_batches.append(batch)
    return Park(batch.token)


def after_pass(core: CoreContext, results: Sequence[WriteResult]) -> None:
    """A pass is over (with writes or not): the drifts it wrote are repaired (or go through the
    runtime); those whose container stopped or went meanwhile are gone."""
    if not core.node.drift_batches:
        return
    outcome = {r.container_id: ("runtime" if r.error or r.untold else "cgroup") for r in results}
    for batch in list(core.node.drift_batches):
        for cid, d in list(batch.pending.items()):
            path = outcome.get(cid)
            t = core.node.containers.get(cid)
            if path is None and (t is None or t.stopped):
                path = "gone"
            if path is not None:
                del batch.pending[cid]
                batch.results.append((d, path))
        if not batch.pending:
            core.node.drift_batches.remove(batch)
            core.resolve(batch.token, batch.results)


def abandon(core: CoreContext) -> None:
    """A connection ended: drift repairs still waiting for a pass are answered as they stand (the next
    Synchronize rebuilds from the cgroups anyway)."""
    for batch in core.node.drift_batches:
        core.resolve(batch.token, batch.results + [(d, "gone") for d in batch.pending.values()])
    core.node.drift_batches.clear()


def runtime_repaired(core: CoreContext, event: RuntimeRepaired) -> Reply:
    """The runtime may hold a stale cpuset for this container: the next pass or reply resends it.
    Not sent: only a reply can (no CRI, old NRI); with cgroup writes on, a started container is in
    a reply only when marked so."""
    node = core.node
    t = node.containers.get(event.container_id)
    if t is None:
        return None
    if not event.sent:
        node.told.pop(t.container_id, None)
        node.via_reply.add(t.container_id)
    elif node.generation != event.generation:  # an event changed state while the repair was in flight
        node.told.pop(t.container_id, None)
    return None


def topology_changed(core: CoreContext, event: TopologyChanged) -> Reply:
    """CPU hotplug without a drain: the state moved onto the engine for the new online set."""
    node, engine = core.node, event.engine
    before = node.engine.topology.online
    state, messages = engine.policy.start(node.state)
    # CPUs that came back: containers whose admitted CPUs are free again get them back
    for a in list(state.assignments.values()):
        missing = a.admitted - a.current
        if a.exclusive and missing and missing.issubset(engine.policy.available_for_exclusive(state)):
            state = state.hold(replace(a, current=a.admitted))
            messages.append(f"{a.pod}/{a.container}: CPUs {missing} are back online; restored")
    # Guaranteed containers that lost every CPU went to the shared pool: pin them again if they fit now
    for t in node.containers.values():
        held = state.get(*t.key)
        if t.stopped or t.intent.qos is not QoS.GUARANTEED or (held is not None and held.exclusive):
            continue
        request = AdmissionRequest(t.key[0], t.key[1], t.intent.qos, t.intent.request_milli,
                                   t.intent.limit_milli, init=t.intent.init, restartable=t.intent.restartable)
        readmitted, decision = engine.admit(engine.remove(state, *t.key), request)
        if decision.admitted and decision.exclusive:
            state = readmitted
            messages.append(f"{t.intent.pod_name}/{t.key[1]}: pinned again on CPUs {decision.cpus}")
    node.engine, node.state = engine, state
    for t in node.containers.values():
        if t.started:  # the kernel drops offlined CPUs from every v1 cpuset: read them back
            node.told.pop(t.container_id, None)
    core.commit()
    log.warning("online CPUs changed", before=str(before), after=str(engine.topology.online),
                shared=str(node.shared_pool))
    for m in messages:
        log.warning("state repaired", repair=m)
    return None
