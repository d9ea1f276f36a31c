"""The service with ``hints.providers = ["cpu", "nics"]``: the real stub and the in-process fake runtime,
a real pod network namespace holding a macvlan on this VM's NIC, and a fixture sysfs root (the
dual-socket tree plus a PCI entry placing that NIC on NUMA node 1 — this VM has one NUMA node and
no SR-IOV NIC). RunPodSandbox starts the lookup; the Guaranteed container lands on node 1."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from nic_fixtures import PodNetns, fixture_sysfs, host_nic, host_pci_of
from svc_harness import DUAL_SOCKET, container, create, document, make_settings, pod, running

from nri_pinner.cli.status import render_status
from nri_pinner.edge.app import Service, build_engine
from nri_pinner.edge.nic_lookup.lookup import NICS_ANNOTATION
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.nri.gen import api_pb2 as api

if os.geteuid() != 0:
    pytest.skip("network namespaces need root", allow_module_level=True)

@pytest.fixture
def workdir() -> Iterator[Path]:
    directory = tempfile.mkdtemp(prefix="nic-", dir="/tmp")  # short: unix socket paths
    yield Path(directory)
    shutil.rmtree(directory, ignore_errors=True)


def nic_service(workdir: Path, policy: str = "single-numa-node") -> tuple[Service, str, str]:
    ifname, bus, dev = host_nic()
    pci = host_pci_of(bus, dev)
    root = workdir / "sysfs"
    shutil.copytree(DUAL_SOCKET, root, symlinks=True)
    fixture_sysfs(root, {pci: 1}, {} if bus == "pci" else {(bus, dev): pci})
    settings = make_settings(workdir, sysfs=root, hints={"providers": ["cpu", "nics"]},
                             topology_manager={"policy": policy})
    engine, nics = build_engine(settings, discover(str(root)))
    assert nics is not None
    return Service(settings, engine, env={}, nics=nics), ifname, pci


async def test_guaranteed_container_lands_on_its_nics_numa_node(workdir: Path, pod_netns: PodNetns) -> None:
    svc, ifname, pci = nic_service(workdir)
    pod_netns.add_veth("eth0")
    pod_netns.add_macvlan(ifname, "net1")
    gpod = pod("fast")
    gpod.linux.namespaces.add(type="network", path=pod_netns.path)
    async with running(svc.settings, svc=svc) as r:
        node1 = r.topology.numa_cpus[1]
        assert await r.conn.state_change(api.RUN_POD_SANDBOX, gpod)
        reply = await r.conn.create_container(create(gpod, container(gpod, "app", 2000, 2000)))
        assert reply is not None
        cpus = CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
        assert len(cpus) == 2 and cpus.issubset(node1) and reply.adjust.linux.resources.cpu.mems == "1"
        doc = document(svc)
        (entry,) = doc["nics"]
        assert entry["pod"] == "uid-fast" and entry["numa"] == [1] and entry["hints"][0] == "{1}"
        assert {x["name"]: x["pci"] for x in entry["links"]} == {"eth0": None, "net1": pci}
        assert "net1=" + pci + "@1" in render_status(doc)
        assert await r.conn.state_change(api.REMOVE_POD_SANDBOX, gpod)
        assert document(svc)["nics"] == []


async def test_host_network_pod_with_annotation_and_plain_pod(workdir: Path) -> None:
    svc, ifname, _ = nic_service(workdir)
    hostnet = pod("hostnet", annotations={NICS_ANNOTATION: ifname})
    plain = pod("plain")  # host network, no annotation: no NIC constraint
    async with running(svc.settings, svc=svc) as r:
        node1 = r.topology.numa_cpus[1]
        reply = await r.conn.create_container(create(hostnet, container(hostnet, "app", 1000, 1000)))
        assert reply is not None and CPUSet.parse(reply.adjust.linux.resources.cpu.cpus).issubset(node1)
        reply = await r.conn.create_container(create(plain, container(plain, "app", 1000, 1000)))
        assert reply is not None and not CPUSet.parse(reply.adjust.linux.resources.cpu.cpus).issubset(node1)
    assert svc.metrics.nic_lookups_late._value.get() == 0
