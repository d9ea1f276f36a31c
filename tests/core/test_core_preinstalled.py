"""NRI v0.6.1 (containerd 1.7) never synchronizes pre-installed plugins: the checkpoint must hold
running containers' exclusive CPUs until the runtime's view arrives, or a new container could get
them (core/connection.py seed). (Was tests/service/test_service_preinstalled.py, through a Service.)"""

from __future__ import annotations

from typing import Any

from core_harness import Edge, container, cpus_of, create, make_core, pod

from nri_pinner.core import events as ev
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.handlers import UpdatesReply

CHECKPOINT: dict[str, Any] = {
    "policy": "static", "reserved": "0", "shared": "0-1,3-7,9-11",
    "entries": [{"container_id": "old", "sandbox_id": "sb-old", "pod": "uid-old", "container": "app",
                 "admitted": "2,8", "current": "2,8", "exclusive": True}]}


def configured_with_checkpoint() -> Edge:
    """A core given the checkpoint and configured by the runtime, never synchronized."""
    return make_core(prior=CHECKPOINT, synchronized=False)


def test_checkpointed_cpus_are_held_without_synchronize() -> None:
    e = configured_with_checkpoint()
    assert e.core.node.state.exclusive_cpus() == CPUSet([2, 8])
    sandbox = pod("new", "guaranteed")
    pinned = cpus_of(e.handle(create(sandbox, container(sandbox, "app", 2000, 2000))).reply)
    assert len(pinned) == 2 and pinned.isdisjoint(CPUSet([2, 8]))
    # the old container's stop (an id only the checkpoint knew) releases its CPUs
    assert isinstance(e.handle(ev.StopContainer("old")).reply, UpdatesReply)
    assert e.core.node.state.exclusive_cpus() == pinned


def test_synchronize_replaces_the_seeded_state() -> None:
    e = configured_with_checkpoint()
    assert e.core.node.state.exclusive_cpus() == CPUSet([2, 8])
    e.sync([], [])  # the runtime runs nothing: the checkpoint entry is stale
    assert not e.core.node.state.exclusive_cpus()
