"""NRI v0.6.1 (containerd 1.7) never synchronizes pre-installed plugins: the checkpoint must hold
running containers' exclusive CPUs until the runtime's view arrives, or a new container could get them."""

from __future__ import annotations

from pathlib import Path

import svc_harness as h

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CreateReply
from nri_pinner.service import checkpoint_file
from nri_pinner.service.app import Service


def _service_with_checkpoint(workdir: Path) -> Service:
    settings = h.make_settings(workdir)
    checkpoint_file.write(settings.state.checkpoint, {"policy": "static", "reserved": "0", "shared": "0-1,3-7,9-11",
                                                 "entries": [{"container_id": "old", "sandbox_id": "sb-old",
                                                              "pod": "uid-old", "container": "app", "admitted": "2,8",
                                                              "current": "2,8", "exclusive": True}]})
    return h.new_service(settings)


def test_checkpointed_cpus_are_held_without_synchronize(workdir: Path) -> None:
    svc = _service_with_checkpoint(workdir)
    plugin = svc.plugin
    plugin.configure(api.ConfigureRequest(runtime_name="containerd", runtime_version="1.7.24"))
    assert svc.plugin.node.state.exclusive_cpus() == CPUSet([2, 8])
    sandbox = h.pod("new", "guaranteed")
    reply = plugin.create_container(h.create(sandbox, h.container(sandbox, "app", 2000, 2000)))
    assert isinstance(reply, CreateReply)
    pinned = CPUSet.parse(reply.cpus)
    assert len(pinned) == 2 and pinned.isdisjoint(CPUSet([2, 8]))
    # the old container's stop (an id only the checkpoint knew) releases its CPUs
    gone = api.Container(id="old", pod_sandbox_id="sb-old", name="app")
    plugin.stop_container(api.StopContainerRequest(pod=api.PodSandbox(id="sb-old"), container=gone))
    assert svc.plugin.node.state.exclusive_cpus() == pinned


def test_synchronize_replaces_the_seeded_state(workdir: Path) -> None:
    svc = _service_with_checkpoint(workdir)
    svc.plugin.configure(api.ConfigureRequest(runtime_name="containerd", runtime_version="2.1.9"))
    svc.plugin.synchronize([], [])  # the runtime runs nothing: the checkpoint entry is stale
    assert not svc.plugin.node.state.exclusive_cpus()
