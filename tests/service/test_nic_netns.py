"""The NIC lookup on real network namespaces: real links made with pyroute2, read back over real netlink
from inside the namespace. This VM has no SR-IOV NIC, so the PCI → NUMA step reads a fixture sysfs
root built here; the one real device here (virtio-net on PCI) is reached through a macvlan moved into
the pod's namespace, exactly as a macvlan CNI would."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from nic_fixtures import PodNetns, fixture_sysfs, host_nic, host_pci_of, on_thread, unique
from pyroute2 import IPRoute  # type: ignore[import-untyped]
from pyroute2.netlink.exceptions import NetlinkError  # type: ignore[import-untyped]

from nri_pinner.edge.nic_lookup.lookup import (
    NICS_ANNOTATION,
    NicLink,
    NicLookup,
    annotated_names,
    bus_info,
    pod_netns_path,
    read_links,
)
from nri_pinner.nri.gen import api_pb2 as api

if os.geteuid() != 0:
    pytest.skip("network namespaces need root", allow_module_level=True)

STARTED_IN = os.readlink("/proc/self/ns/net")


def sandbox(sid: str, netns_path: str = "", annotations: dict[str, str] | None = None) -> api.PodSandbox:
    pod = api.PodSandbox(id=sid, name=f"pod-{sid}", uid=f"uid-{sid}", annotations=annotations or {})
    pod.linux.namespaces.add(type="ipc", path="/proc/1/ns/ipc")
    if netns_path:
        pod.linux.namespaces.add(type="network", path=netns_path)
    return pod


def numa_root(tmp_path: Path, node: int) -> tuple[str, str, str]:
    """A fixture sysfs where the host NIC's PCI function is on ``node``; returns (root, ifname, pci)."""
    ifname, bus, dev = host_nic()
    pci = host_pci_of(bus, dev)
    bus_devices = {} if bus == "pci" else {(bus, dev): pci}
    return fixture_sysfs(tmp_path, {pci: node}, bus_devices), ifname, pci


def test_veth_only_pod_gives_no_constraint(pod_netns: PodNetns, tmp_path: Path) -> None:
    pod_netns.add_veth("eth0")
    links = on_thread(read_links, pod_netns.path, str(tmp_path))
    assert [(x.name, x.kind, x.pci, x.numa) for x in links] == [("eth0", "veth", None, None)]
    assert "virtual" in links[0].note


def test_macvlan_named_like_a_host_nic_resolves_to_the_host_device(pod_netns: PodNetns, tmp_path: Path) -> None:
    root, host_if, pci = numa_root(tmp_path, 1)
    # the pod's "eth0" is a macvlan; the host's eth0 (the same name) must not be what is read
    pod_netns.add_veth("eth0")
    pod_netns.add_macvlan(host_if, "net1")
    links = {x.name: x for x in on_thread(read_links, pod_netns.path, root)}
    assert set(links) == {"eth0", "net1"}
    assert links["eth0"] == NicLink("eth0", "veth", None, None, links["eth0"].note)
    assert (links["net1"].kind, links["net1"].pci, links["net1"].numa) == ("macvlan", pci, 1)


def test_host_nic_without_numa_affinity_gives_none(pod_netns: PodNetns, tmp_path: Path) -> None:
    root, host_if, pci = numa_root(tmp_path, -1)
    pod_netns.add_macvlan(host_if, "net1")
    (link,) = on_thread(read_links, pod_netns.path, root)
    assert (link.pci, link.numa) == (pci, None)
    assert "no NUMA affinity" in link.note


def test_dummy_and_bridge_links_have_no_device(pod_netns: PodNetns, tmp_path: Path) -> None:
    pod_netns.add_inside("br0", "bridge")
    try:
        pod_netns.add_inside("dummy0", "dummy")
        expected = {("br0", "bridge"), ("dummy0", "dummy")}
    except NetlinkError as exc:  # this VM's kernel is built without the dummy driver
        assert exc.code == 95, exc
        expected = {("br0", "bridge")}
    links = on_thread(read_links, pod_netns.path, str(tmp_path))
    assert {(x.name, x.kind) for x in links} == expected
    assert all(x.pci is None and x.numa is None for x in links)


def test_the_calling_thread_keeps_its_namespace_only_the_lookup_thread_moves(pod_netns: PodNetns,
                                                                           tmp_path: Path) -> None:
    pod_netns.add_veth("eth0")
    before = os.readlink("/proc/thread-self/ns/net")
    assert before == STARTED_IN, "an earlier test left this thread in another namespace"
    lookup = NicLookup(str(tmp_path), wait_seconds=10)
    found = lookup.wait(sandbox("sb1", pod_netns.path))
    assert found is not None and [x.name for x in found.links] == ["eth0"]
    assert os.readlink("/proc/thread-self/ns/net") == before
    assert os.readlink(f"/proc/{os.getpid()}/ns/net") == before


def test_lookup_is_cached_per_sandbox_and_feeds_numa_nodes(pod_netns: PodNetns, tmp_path: Path) -> None:
    root, host_if, _ = numa_root(tmp_path, 1)
    pod_netns.add_macvlan(host_if, "net1")
    calls: list[str] = []

    def counting(path: str, sysfs: str, names: Sequence[str] | None) -> tuple[NicLink, ...]:
        calls.append(path)
        return read_links(path, sysfs, names)

    lookup = NicLookup(root, wait_seconds=10, reader=counting)
    pod = sandbox("sb2", pod_netns.path)
    lookup.start(pod)  # RunPodSandbox
    first = lookup.wait(pod)  # first container
    second = lookup.wait(pod)
    assert first is second and calls == [pod_netns.path]
    assert lookup.numa_nodes("uid-sb2") == (1,)
    assert lookup.snapshot()[0]["links"][0]["numa"] == 1
    lookup.forget("sb2")
    assert lookup.numa_nodes("uid-sb2") is None and lookup.snapshot() == []


def test_host_network_pod_names_its_nics_in_the_annotation(tmp_path: Path) -> None:
    root, host_if, pci = numa_root(tmp_path, 0)
    lookup = NicLookup(root, wait_seconds=10)
    found = lookup.wait(sandbox("sb3", annotations={NICS_ANNOTATION: host_if}))
    assert found is not None and found.netns == "" and not found.problem
    assert [(x.name, x.pci, x.numa) for x in found.links] == [(host_if, pci, 0)]
    plain = lookup.wait(sandbox("sb4"))  # host network, nothing named: no lookup, no constraint
    assert plain is not None and plain.links == () and lookup.numa_nodes("uid-sb4") == ()


def test_annotation_narrows_a_pod_namespace_and_missing_names_are_reported(pod_netns: PodNetns,
                                                                         tmp_path: Path) -> None:
    root, host_if, _ = numa_root(tmp_path, 1)
    pod_netns.add_veth("eth0")
    pod_netns.add_macvlan(host_if, "net1")
    lookup = NicLookup(root, wait_seconds=10)
    only = lookup.wait(sandbox("sb5", pod_netns.path, {NICS_ANNOTATION: "net1"}))
    assert only is not None and [x.name for x in only.links] == ["net1"]
    missing = lookup.wait(sandbox("sb6", pod_netns.path, {NICS_ANNOTATION: "net1,net9"}))
    assert missing is not None and missing.links == () and "net9 not found" in missing.problem


def test_a_vanished_namespace_is_a_problem_not_a_failure(tmp_path: Path) -> None:
    lookup = NicLookup(str(tmp_path), wait_seconds=10)
    found = lookup.wait(sandbox("sb7", f"/var/run/netns/{unique('gone')}"))
    assert found is not None and found.links == () and "No such file" in found.problem
    assert lookup.numa_nodes("uid-sb7") == ()


def test_a_slow_lookup_is_not_waited_for_past_the_deadline(tmp_path: Path) -> None:
    release = threading.Event()
    late: list[int] = []

    def slow(path: str, sysfs: str, names: Sequence[str] | None) -> tuple[NicLink, ...]:
        release.wait(10)  # stands for netlink that does not answer
        return (NicLink("net1", "device", "0000:3b:00.0", 1),)

    lookup = NicLookup(str(tmp_path), wait_seconds=0.05, reader=slow, on_late=lambda: late.append(1))
    pod = sandbox("sb8", "/var/run/netns/whatever")
    assert lookup.wait(pod) is None
    assert (lookup.late, late) == (1, [1])
    assert lookup.numa_nodes("uid-sb8") is None and lookup.snapshot() == [{"sandbox_id": "sb8", "pending": True}]
    release.set()
    assert lookup.start(pod).result(timeout=5).numa_nodes == (1,)
    assert lookup.numa_nodes("uid-sb8") == (1,)


@pytest.mark.parametrize("text", ["", "eth1,,eth2", "eth1,eth1", "a/b", "x" * 16, "eth 1"])
def test_bad_annotations_are_refused_with_the_text(text: str) -> None:
    with pytest.raises(ValueError, match=r"nri-pinner\.io/nics"):
        annotated_names(sandbox("sb", annotations={NICS_ANNOTATION: text}))


def test_bad_annotation_gives_no_hint_and_says_why(tmp_path: Path) -> None:
    lookup = NicLookup(str(tmp_path))
    found = lookup.wait(sandbox("sb9", annotations={NICS_ANNOTATION: "eth1,,"}))
    assert found is not None and found.links == () and NICS_ANNOTATION in found.problem


def test_netns_path_comes_from_the_sandbox_namespaces() -> None:
    assert pod_netns_path(sandbox("a", "/var/run/netns/cni-1234")) == "/var/run/netns/cni-1234"
    assert pod_netns_path(sandbox("b")) == ""
    assert annotated_names(sandbox("c", annotations={NICS_ANNOTATION: " eth1, eth2 "})) == ("eth1", "eth2")


def test_macvlan_chain_in_the_same_namespace(tmp_path: Path) -> None:
    # host-network pod annotating a macvlan whose lower device is in the same (host) namespace
    root, host_if, pci = numa_root(tmp_path, 1)
    name = unique("npq")
    with IPRoute() as ip:
        ip.link("add", ifname=name, kind="macvlan", link=ip.link_lookup(ifname=host_if)[0], macvlan_mode="bridge")
        try:
            (link,) = on_thread(read_links, "", root, [name])
        finally:
            ip.link("del", index=ip.link_lookup(ifname=name)[0])
    assert (link.kind, link.pci, link.numa) == ("macvlan", pci, 1)


def test_ethtool_bus_info_gives_the_same_device_as_the_parent_attributes(pod_netns: PodNetns,
                                                                        tmp_path: Path) -> None:
    # kernels that do not report IFLA_PARENT_DEV_*: the driver's bus-info, asked in the right namespace
    root, host_if, pci = numa_root(tmp_path, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as io:
        assert bus_info(io, host_if) == pci
        assert bus_info(io, "lo") is None and bus_info(io, unique("none")) is None
    pod_netns.add_veth("eth0")
    pod_netns.add_macvlan(host_if, "net1")
    links = {x.name: x for x in on_thread(lambda: read_links(pod_netns.path, root, parent_attrs=False))}
    assert (links["net1"].pci, links["net1"].numa) == (pci, 1)
    assert (links["eth0"].pci, links["eth0"].numa) == (None, None)
