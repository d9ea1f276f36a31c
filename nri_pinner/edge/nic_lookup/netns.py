"""A network namespace's links and their devices, read from inside it; then placed on the host's sysfs.

The host's ``/sys/class/net`` shows only the host namespace, and names like ``eth0`` repeat in every
pod, so the reading thread ``setns()``es into the pod's namespace (a thread's namespace is its own;
the caller runs this on a thread that ends afterwards, so nothing has to be restored and nothing
forks). There it lists the links over netlink and takes each link's parent device
(``IFLA_PARENT_DEV_BUS_NAME`` / ``IFLA_PARENT_DEV_NAME``, or ethtool's bus-info where the kernel does
not report those): physical NICs and SR-IOV VFs have one; macvlan/macvtap/ipvlan/vlan links are
followed to their lower device, which usually sits in the host namespace (``IFLA_LINK_NETNSID`` = the
host's id as the pod sees it), read through netlink and ioctl sockets opened before the switch; veth
and other virtual links have none and constrain nothing.

Two steps, so that the one needing ``CAP_SYS_ADMIN`` can run in another process (the NIC lookup
service, ``server``): `read_devices` (inside the namespace: link → parent device as bus and
name) and `place_link` (on the host's sysfs: device → PCI function and NUMA node). `read_links` is both.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pyroute2 import IPRoute  # type: ignore[import-untyped]

from ...engine.topology.nic_pci import PCI_ADDRESS, place_device

STACKED_KINDS = frozenset({"macvlan", "macvtap", "ipvlan", "ipvtap", "vlan"})
MAX_STACK_DEPTH = 4
IFF_LOOPBACK = 0x8
IFNAMSIZ = 16
CLONE_NEWNET = 0x40000000
SIOCETHTOOL, ETHTOOL_GDRVINFO = 0x8946, 0x3
DRVINFO_SIZE, BUS_INFO_OFFSET = 196, 100  # struct ethtool_drvinfo: cmd, driver/version/fw_version[32], bus_info


class SetnsRefused(PermissionError):
    """setns() into a network namespace said EPERM: no CAP_SYS_ADMIN, or a seccomp filter (systemd's
    ``RestrictNamespaces=``) forbids it."""


@dataclass(frozen=True)
class NicLink:
    """One interface of a pod and where its device sits (``numa=None``: no constraint from it)."""

    name: str
    kind: str  # netlink kind; "device" / "vf" for links with a device of their own (a NIC, an SR-IOV VF)
    pci: str | None = None
    numa: int | None = None
    note: str = ""  # why it gives no NUMA node

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "pci": self.pci, "numa": self.numa, "note": self.note}


@dataclass(frozen=True)
class LinkDevice:
    """One link as read inside its namespace: the parent device (bus, name) of the link or of the lower
    link it stacks on (``via``: the lower links walked), or ``note``: why it has none."""

    name: str
    kind: str
    bus: str | None = None
    dev: str | None = None
    via: str = ""
    note: str = ""


def place_link(link: LinkDevice, sysfs_root: str) -> NicLink:
    """The link's device → PCI function and NUMA node, read under ``sysfs_root``."""
    if not (link.bus and link.dev):
        return NicLink(link.name, link.kind, note=link.note)
    placed = place_device(sysfs_root, link.bus, link.dev)
    note = placed.note + (f" (via {link.via})" if link.via and placed.note else "")
    kind = "vf" if placed.vf and link.kind == "device" else link.kind
    return NicLink(link.name, kind, placed.pci, placed.numa, note)


Named = TypeVar("Named", LinkDevice, NicLink)


def select(links: Sequence[Named], names: Sequence[str] | None) -> tuple[Named, ...]:
    """The links named, in that order (all when ``names`` is None); LookupError names the missing."""
    if names is None:
        return tuple(links)
    by_name = {link.name: link for link in links}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise LookupError(f"interface(s) {', '.join(missing)} not found")
    return tuple(by_name[n] for n in names)


def read_links(netns_path: str, sysfs_root: str, names: Sequence[str] | None = None, *,
               parent_attrs: bool = True) -> tuple[NicLink, ...]:
    """The links of a namespace and their devices, placed under ``sysfs_root``. With ``netns_path`` this
    moves the calling thread into that namespace for good: call it only on a thread that ends afterwards.
    ``parent_attrs=False`` reads devices through ethtool only, as on kernels without ``IFLA_PARENT_DEV_*``."""
    devices = select(read_devices(netns_path, parent_attrs=parent_attrs), names)
    return tuple(place_link(link, sysfs_root) for link in devices)


def read_devices(netns_path: str, *, parent_attrs: bool = True) -> tuple[LinkDevice, ...]:
    """The links of the namespace at ``netns_path`` ("" = the caller's own) and their parent devices;
    moves the calling thread into that namespace for good (see `read_links`)."""
    host_fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        # opened before the switch: these stay bound to the host namespace
        with IPRoute() as host, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as host_io:
            if netns_path:
                enter_netns(netns_path)
            with IPRoute() as inside, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as inside_io:
                ctx = _Sides(inside, inside_io, host, host_io, _nsid_of(inside, host_fd) if netns_path else None,
                             parent_attrs)
                return tuple(_describe(link, ctx)
                             for link in inside.get_links() if not int(link.get("flags", 0)) & IFF_LOOPBACK)
    finally:
        os.close(host_fd)


def enter_netns(path: str) -> None:
    """Move the calling thread into the network namespace at ``path`` (setns with ``CLONE_NEWNET``:
    systemd's ``RestrictNamespaces=net`` lets that through and refuses a zero nstype)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        _setns(fd, CLONE_NEWNET)
    except OSError as exc:
        if exc.errno == errno.EPERM:
            raise SetnsRefused(errno.EPERM, "setns into the pod's network namespace not permitted "
                                            "(no CAP_SYS_ADMIN, or RestrictNamespaces)", path) from exc
        raise
    finally:
        os.close(fd)


def _setns(fd: int, nstype: int) -> None:
    setns = getattr(os, "setns", None)  # Python 3.12+
    if setns is not None:
        setns(fd, nstype)
        return
    libc = ctypes.CDLL(None, use_errno=True)  # the process's own libc: no library search, no fork
    if libc.setns(fd, nstype) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


@dataclass(frozen=True)
class _Sides:
    inside: IPRoute
    inside_io: socket.socket  # for ethtool ioctls, bound to the pod's namespace
    host: IPRoute
    host_io: socket.socket
    host_nsid: int | None  # the host namespace's id as the pod's namespace sees it
    parent_attrs: bool


def _nsid_of(sock: IPRoute, fd: int) -> int | None:
    """The id the current namespace gives the namespace behind ``fd`` (None if it has none)."""
    try:
        reply = sock.get_netnsid(fd=fd)
    except Exception:
        return None
    nsid = reply.get("nsid") if reply else None
    return nsid if isinstance(nsid, int) and nsid >= 0 else None


def bus_info(io: socket.socket, ifname: str) -> str | None:
    """ethtool's bus-info (``ETHTOOL_GDRVINFO``) for a link of ``io``'s namespace: a PCI address for
    PCI NICs (virtio-net reports its PCI function); None when the driver has none or refuses."""
    info = bytearray(struct.pack("I", ETHTOOL_GDRVINFO) + bytes(DRVINFO_SIZE - 4))
    buf = (ctypes.c_char * DRVINFO_SIZE).from_buffer(info)
    ifreq = struct.pack("16sP", ifname.encode()[:IFNAMSIZ - 1], ctypes.addressof(buf))
    try:
        fcntl.ioctl(io.fileno(), SIOCETHTOOL, ifreq)
    except OSError:
        return None
    finally:
        del buf  # release the export so the bytearray can be read and freed
    text = bytes(info[BUS_INFO_OFFSET:BUS_INFO_OFFSET + 32]).split(b"\0", 1)[0].decode(errors="replace")
    return text if PCI_ADDRESS.match(text) else None


def _parent(link: Any, io: socket.socket, ctx: _Sides) -> tuple[str | None, str | None]:
    if ctx.parent_attrs:
        bus, dev = link.get("IFLA_PARENT_DEV_BUS_NAME"), link.get("IFLA_PARENT_DEV_NAME")
        if bus and dev:
            return str(bus), str(dev)
    if link.get(("IFLA_LINKINFO", "IFLA_INFO_KIND")) is None:  # a device link: ask its driver
        address = bus_info(io, str(link.get("ifname")))
        if address is not None:
            return "pci", address
    return None, None


def _describe(link: Any, ctx: _Sides) -> LinkDevice:
    name = str(link.get("ifname"))
    kind = str(link.get(("IFLA_LINKINFO", "IFLA_INFO_KIND")) or "device")
    current, sock, io, via = link, ctx.inside, ctx.inside_io, ""
    for _ in range(MAX_STACK_DEPTH):
        bus, dev = _parent(current, io, ctx)
        if bus and dev:
            return LinkDevice(name, kind, bus, dev, via)
        lower_kind = current.get(("IFLA_LINKINFO", "IFLA_INFO_KIND"))
        lower_index = current.get("IFLA_LINK")
        if lower_kind not in STACKED_KINDS or not lower_index:
            break
        nsid = current.get("IFLA_LINK_NETNSID")
        if nsid is not None:
            if nsid != ctx.host_nsid or sock is ctx.host:
                return LinkDevice(name, kind, note=f"{lower_kind} on a link in another network namespace")
            sock, io = ctx.host, ctx.host_io
        lowers = sock.get_links(int(lower_index))
        if not lowers:
            return LinkDevice(name, kind, note=f"{lower_kind}: lower link {lower_index} not found")
        current = lowers[0]
        via = f"{current.get('ifname')}" if not via else f"{via}/{current.get('ifname')}"
    note = "virtual link, no device" if not via else f"lower link {via} has no device"
    return LinkDevice(name, kind, note=f"{kind}: {note}")
