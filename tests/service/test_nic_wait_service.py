"""A create waiting for its pod's NIC lookup through the service (core/nic_waits.py, the plugin running the
lookup and the timer): a lookup that ends within the wait places the container on its NICs' node; one still
running at the wait's limit lets the create go on without NIC hints, counted late. The lookup here is a
gated reader (no namespace: what a real one reads is tested in test_nic_service.py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from svc_harness import container, create, make_settings, pod, running

from nri_pinner.edge.app import Service
from nri_pinner.edge.nic_lookup.lookup import NicLink, NicLookup
from nri_pinner.engine.admission_engine import Engine
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.nicmanager.hints import NicHintProvider
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api


def nic_service(workdir: Path, wait_seconds: float, gate: threading.Event) -> Service:
    settings = make_settings(workdir, hints={"providers": ["cpu", "nics"]},
                             topology_manager={"policy": "single-numa-node"})

    def reader(path: str, sysfs: str, names: Sequence[str] | None) -> tuple[NicLink, ...]:
        gate.wait(10)
        return (NicLink("net1", "device", "0000:3b:00.2", 1),)

    topology = discover(settings.sysfs_root)
    nics = NicLookup(settings.sysfs_root, wait_seconds, reader=reader)
    engine = Engine.from_settings(settings, topology, [NicHintProvider(topology.numa_nodes, nics.numa_nodes)])
    return Service(settings, engine, env={}, nics=nics)


def netns_pod(name: str) -> api.PodSandbox:
    p = pod(name)
    p.linux.namespaces.add(type="network", path=f"/var/run/netns/cni-{name}")
    return p


async def test_a_lookup_ending_within_the_wait_places_the_container_on_its_nics_node(workdir: Path) -> None:
    gate = threading.Event()
    svc = nic_service(workdir, 10.0, gate)
    fast = netns_pod("fast")
    async with running(svc.settings, svc=svc) as r:
        threading.Timer(0.1, gate.set).start()  # the lookup ends while the create waits
        reply = await r.conn.create_container(create(fast, container(fast, "app", 2000, 2000)))
        assert reply is not None
        cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(cpus) == 2 and cpus.issubset(r.topology.numa_cpus[1])
    assert svc.metrics.nic_lookups_late._value.get() == 0


async def test_a_lookup_running_past_the_wait_lets_the_create_go_on_late(workdir: Path) -> None:
    gate = threading.Event()
    svc = nic_service(workdir, 0.05, gate)
    slow = netns_pod("slow")
    try:
        async with running(svc.settings, svc=svc) as r:
            reply = await r.conn.create_container(create(slow, container(slow, "app", 2000, 2000)))
            assert reply is not None and len(CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)) == 2
            assert svc.metrics.nic_lookups_late._value.get() == 1
    finally:
        gate.set()
