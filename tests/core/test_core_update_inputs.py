"""What the core needs read for an UpdateContainer (core/update_inputs.py): the container's devices only for
a kubelet resize of one without exclusive CPUs (a fractional -> integer one is admitted afresh with them),
its cgroup only for an adoptable container the core does not know. The devices asked for are the ones the
fresh admission uses: handed in, they decide where the resized container lands."""

from __future__ import annotations

from core_harness import make_core, make_settings

from nri_pinner.core import events as ev
from nri_pinner.core.update_inputs import UpdateNeeds, update_needs
from nri_pinner.engine.devicemanager.hints import Device
from nri_pinner.nri.gen import api_pb2 as api
from testkit.pod_builders import container, pod, resize_request

BPOD, GPOD, FPOD = pod("burst", "burstable"), pod("gold"), pod("frac")
B = container(BPOD, "app", 500, 1000)
G = container(GPOD, "app", 2000, 2000)
F = container(FPOD, "app", 1500, 1500)  # Guaranteed, fractional: on the shared pool


def cpuset_only(c: api.Container, sandbox: api.PodSandbox, cpus: str) -> api.UpdateContainerRequest:
    req = api.UpdateContainerRequest(pod=sandbox, container=c)
    req.linux_resources.cpu.cpus = cpus
    return req


def test_a_resize_of_a_container_without_exclusive_cpus_needs_its_devices() -> None:
    e = make_core()
    e.run(BPOD, B)
    e.run(FPOD, F)
    e.run(GPOD, G)
    node = e.core.node
    assert update_needs(node, resize_request(F, FPOD, 2000)) == UpdateNeeds(True, "")
    assert update_needs(node, resize_request(B, BPOD, 700, 1000)) == UpdateNeeds(True, "")
    # exclusive already: a grow stays inside its admitted affinity; a cpuset-only update admits nothing
    assert update_needs(node, resize_request(G, GPOD, 4000)) == UpdateNeeds(False, "")
    assert update_needs(node, cpuset_only(F, FPOD, "1-11")) == UpdateNeeds(False, "")


def test_an_unknown_container_needs_its_cgroup_when_it_can_be_adopted() -> None:
    e = make_core()
    node = e.core.node
    assert update_needs(node, resize_request(G, GPOD, 2000)) == UpdateNeeds(True, G.linux.cgroups_path)
    assert update_needs(node, cpuset_only(G, GPOD, "1-11")) == UpdateNeeds(False, G.linux.cgroups_path)
    stopped = container(GPOD, "done", 2000, 2000, state=api.CONTAINER_STOPPED)
    assert update_needs(node, resize_request(stopped, GPOD, 2000)) == UpdateNeeds(True, "")
    elsewhere = container(BPOD, "app", 2000, 2000)  # names another pod's sandbox than the update's
    assert update_needs(node, resize_request(elsewhere, GPOD, 2000)).cgroup == ""


def test_the_devices_asked_for_place_the_fresh_admission() -> None:
    on_node = {}
    for numa in (0, 1):
        e = make_core(make_settings(topology_manager={"policy": "single-numa-node"},
                                    hints={"providers": ["cpu", "devices"]}))
        e.run(FPOD, F)
        req = resize_request(F, FPOD, 2000)
        assert update_needs(e.core.node, req).extras
        e.handle(ev.UpdateContainer(req, {"devices": {"gpu": [Device(f"gpu{numa}", frozenset({numa}))]}}))
        cpus = e.core.node.desired(e.core.node.containers[F.id])[0]
        on_node[numa] = set(e.topology.numa_of(cpus))
        assert len(cpus) == 2
    assert on_node == {0: {0}, 1: {1}}
