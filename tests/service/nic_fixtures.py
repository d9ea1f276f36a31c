"""Real network namespaces and links for the NIC tests (pyroute2, as root), removed after each test.

Network namespaces are made with pyroute2's ``netns.create`` (it forks a helper — fine in a test
process, never done by the service). Links that cannot change namespace (bridges) are made inside
the namespace by a thread that ``setns()``es into it.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pyroute2 import IPRoute, netns  # type: ignore[import-untyped]

T = TypeVar("T")
_serial = itertools.count()

def unique(prefix: str) -> str:
    """Short unique link/namespace names (IFNAMSIZ is 16): tests may run next to other test runs."""
    return f"{prefix}{os.getpid() % 100000}{next(_serial)}"


def in_netns(path: str, fn: Callable[[IPRoute], T]) -> T:
    """Run ``fn`` with a netlink socket inside the namespace, on a thread that ends afterwards."""

    def run() -> T:
        fd = os.open(path, os.O_RDONLY)
        try:
            netns.setns(fd, flags=0)
        finally:
            os.close(fd)
        with IPRoute() as ip:
            return fn(ip)

    return on_thread(run)


def on_thread(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` on a thread of its own, as the service runs a lookup (it may setns() that thread)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


class PodNetns:
    """A namespace standing in for a pod's; host-side links made for it are deleted on cleanup."""

    def __init__(self) -> None:
        self.name = unique("npt")
        netns.create(self.name)
        self.path = f"/var/run/netns/{self.name}"
        self.host_links: list[str] = []

    def move(self, ip: IPRoute, ifname: str, new_name: str | None = None) -> None:
        index = ip.link_lookup(ifname=ifname)[0]
        ip.link("set", index=index, net_ns_fd=self.name)
        if new_name is not None:
            in_netns(self.path, lambda inner: inner.link("set", index=inner.link_lookup(ifname=ifname)[0],
                                                          ifname=new_name))

    # pyroute2's synchronous API refuses to run on a thread with a running asyncio loop (an async
    # test): every netlink step here runs on a thread of its own.
    def add_veth(self, inside_name: str) -> None:
        on_thread(self._add_veth, inside_name)

    def add_macvlan(self, lower: str, inside_name: str) -> None:
        on_thread(self._add_macvlan, lower, inside_name)

    def close(self) -> None:
        on_thread(self._close)

    def _add_veth(self, inside_name: str) -> None:
        host_end, pod_end = unique("nph"), unique("npp")
        with IPRoute() as ip:
            ip.link("add", ifname=host_end, kind="veth", peer={"ifname": pod_end})
            self.host_links.append(host_end)
            self.move(ip, pod_end, inside_name)

    def _add_macvlan(self, lower: str, inside_name: str) -> None:
        temp = unique("npm")
        with IPRoute() as ip:
            ip.link("add", ifname=temp, kind="macvlan", link=ip.link_lookup(ifname=lower)[0], macvlan_mode="bridge")
            self.host_links.append(temp)  # in case the move fails
            self.move(ip, temp, inside_name)

    def add_inside(self, ifname: str, kind: str) -> None:
        in_netns(self.path, lambda ip: ip.link("add", ifname=ifname, kind=kind))

    def _close(self) -> None:
        with IPRoute() as ip:
            for name in self.host_links:
                for index in ip.link_lookup(ifname=name):
                    ip.link("del", index=index)
        netns.remove(self.name)


def host_nic() -> tuple[str, str, str]:
    """(ifname, parent bus, parent device) of a host link that has a device, e.g. virtio-net here."""
    found = on_thread(_host_nic)
    if found is None:
        pytest.skip("this machine has no network link with a parent device")
    return found


def _host_nic() -> tuple[str, str, str] | None:
    with IPRoute() as ip:
        for link in ip.get_links():
            bus, dev = link.get("IFLA_PARENT_DEV_BUS_NAME"), link.get("IFLA_PARENT_DEV_NAME")
            if bus and dev and link.get(("IFLA_LINKINFO", "IFLA_INFO_KIND")) is None:
                return str(link.get("ifname")), str(bus), str(dev)
    return None


def host_pci_of(bus: str, dev: str) -> str:
    """The PCI function above a host bus device, read from the real /sys (the expected answer)."""
    real = Path(os.path.realpath(f"/sys/bus/{bus}/devices/{dev}"))
    for part in [real.name, *(p.name for p in real.parents)]:
        if part.count(":") == 2 and "." in part:
            return part
    pytest.skip(f"host device {bus}/{dev} is not on PCI")


def fixture_sysfs(root: Path, numa: dict[str, int], bus_devices: dict[tuple[str, str], str] | None = None,
                  vfs: dict[str, str] | None = None) -> str:
    """A sysfs tree: PCI functions with ``numa_node``, non-PCI bus devices under a PCI function,
    and SR-IOV VFs (``physfn`` links), laid out as the kernel does (bus entries are symlinks)."""
    devices = root / "sys" / "devices" / "pci0000:00"
    pci_bus = root / "sys" / "bus" / "pci" / "devices"
    pci_bus.mkdir(parents=True, exist_ok=True)
    for address, node in numa.items():
        d = devices / address
        d.mkdir(parents=True, exist_ok=True)
        (d / "numa_node").write_text(f"{node}\n")
        (pci_bus / address).symlink_to(os.path.relpath(d, pci_bus))
    for (bus, name), address in (bus_devices or {}).items():
        d = devices / address / name
        d.mkdir(parents=True, exist_ok=True)
        entries = root / "sys" / "bus" / bus / "devices"
        entries.mkdir(parents=True, exist_ok=True)
        (entries / name).symlink_to(os.path.relpath(d, entries))
    for vf, pf in (vfs or {}).items():
        (devices / vf / "physfn").symlink_to(os.path.relpath(devices / pf, devices / vf))
    return str(root)
