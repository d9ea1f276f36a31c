"""A runtime connection in the core: Configure (hold the checkpoint's exclusive CPUs until the
runtime's view replaces them), Synchronize (rebuild from the runtime and the cgroups), the end of a
connection, and a reply the runtime never saw."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from ..engine.admission_engine import AdmissionRequest
from ..engine.qos import QoS
from ..nri.handlers import UpdatesReply
from . import pod_level, pod_scope_blocks
from .checkpoint import Snapshot, checkpoint_entries, entry_extras, held_from_checkpoint
from .events import Configured, ReplyDiscarded, Synchronize
from .lifecycle import pending_updates
from .passes import pass_wait_seconds
from .rebuild import note_unreadable, rebuild
from .repairs import abandon
from .state import Containers

if TYPE_CHECKING:
    from .context import CoreContext, Reply

log = structlog.get_logger("nri_pinner.service")


def configure(core: CoreContext, event: Configured) -> Reply:
    core.passes.wait_seconds = pass_wait_seconds(event.request_timeout_ms)
    seed(core)
    return None


def seed(core: CoreContext) -> None:
    """Hold the checkpoint's exclusive CPUs until Synchronize replaces them with the runtime's view.

    NRI v0.6.1 (containerd 1.7) never synchronizes pre-installed plugins, so without this a
    restarted node could hand a running container's exclusive CPUs to a new one.
    """
    node = core.node
    if node.containers or not node.prior:
        return
    state, node.seeded, problems = held_from_checkpoint(node.engine, node.prior)
    for problem in problems:
        log.warning("checkpoint entry ignored", problem=problem)
    node.state, repairs = node.engine.policy.start(state)
    for message in repairs:
        log.warning("state repaired", repair=message)
    node.publish()
    log.info("holding checkpointed exclusive CPUs until the runtime synchronizes", containers=len(node.seeded),
             exclusive=str(node.state.exclusive_cpus()))


def synchronize(core: CoreContext, event: Synchronize) -> Reply:
    """Rebuild; the started containers' cgroups are written by a pass this reply waits for, so a failed
    write can still ride on it."""
    node = core.node
    cgroups = event.cgroups
    result = rebuild(node.engine, node.prior, event.pods, event.containers, cgroups.get if cgroups else None,
                     gated=pod_level.gate_on_in_container_scope(core.settings),
                     pod_scope=pod_scope_blocks.gate_on_in_pod_scope(core.settings))
    node.state, node.containers = result.state, Containers(result.containers)
    node.told, node.via_reply, node.recorded = result.told, set(), result.recorded
    node.seeded.clear()
    node.waiting = result.waiting
    core.quotas.reset()  # the first pass reads every exclusive pod's cgroup quota again
    note_unreadable(result, core.count)
    for message in result.repairs:
        log.warning("state repaired", repair=message)
    core.commit()
    generation = node.generation

    def reply(late: bool) -> Reply:
        updates = pending_updates(core)
        log.info("synchronized", pods=len(event.pods), containers=len(event.containers), repairs=len(result.repairs),
                 updates=len(updates), shared=str(node.shared_pool))
        return UpdatesReply(updates)

    if not core.node.cgroup_writes:
        return reply(False)
    return core.park_until_pass(generation, reply, "Synchronize")


def forget_connection(core: CoreContext) -> Reply:
    """The next Synchronize rebuilds from the runtime; what we know now is the best hint."""
    node = core.node
    node.forget_told()
    core.passes.forget()
    abandon(core)
    view = node.view()
    node.prior = checkpoint_entries(Snapshot(view.state, view.containers, view.engine.policy.reserved,
                                             view.shared_pool, lambda key: entry_extras(view.engine, view.state,
                                                                                          key)).body())
    return None


def undo_discarded_reply(core: CoreContext, event: ReplyDiscarded) -> Reply:
    """A late answer never reached the runtime: undo what it decided and resend every cpuset."""
    node = core.node
    if event.handler == "create_container":
        t = node.containers.get(event.container_id)
        if t is not None:
            t.quota_removed = False  # the fallback's reply has no quota: the kubelet's stays
            node.state = node.engine.remove(node.state, *t.key)
            if core.settings.nri.on_timeout == "fail":  # the fallback failed the create
                node.drop(t.container_id)
                log.warning("late decision undone; the create had failed", container=t.key[1])
            else:
                shared = AdmissionRequest(t.key[0], t.key[1], QoS.BEST_EFFORT)
                node.state, _ = node.engine.admit(node.state, shared)
                log.warning("late decision undone; container stays on the shared pool", container=t.key[1])
    node.forget_told()
    core.commit()
    return None
