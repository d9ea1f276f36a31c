"""A pod's network interfaces and the NUMA nodes of their PCI devices, read inside its network namespace.

The host's ``/sys/class/net`` shows only the host namespace, and names like ``eth0`` repeat in every
pod, so each lookup runs on a short-lived thread of its own that ``setns()``es into the pod's
namespace (a thread's namespace is its own; the thread then ends, so nothing has to be restored and
nothing forks inside the gRPC process). There it lists the links over netlink and takes each link's
parent device (``IFLA_PARENT_DEV_BUS_NAME`` / ``IFLA_PARENT_DEV_NAME``, or ethtool's bus-info where
the kernel does not report those): physical NICs and SR-IOV VFs have one; macvlan/macvtap/ipvlan/vlan
links are followed to their lower device, which usually sits in the host namespace
(``IFLA_LINK_NETNSID`` = the host's id as the pod sees it), read through netlink and ioctl sockets
opened before the switch; veth and other virtual links have none and constrain nothing. The bus
device is then resolved to a PCI function and NUMA node on the host's sysfs.

Host-network pods have no namespace of their own: they name their interfaces in the pod annotation
``nri-pinner.io/nics: "eth1,eth2"`` (in a pod namespace the annotation narrows the links that count).

Looked up once per sandbox (RunPodSandbox, or its first container) and cached; a create waits at most
``LOOKUP_WAIT_SECONDS`` for a lookup still running, then gets no NIC hint (warning, counted).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import structlog
from pyroute2 import IPRoute, netns  # type: ignore[import-untyped]

from ..engine.topology.nic_pci import PCI_ADDRESS, place_device
from ..nri.gen import api_pb2 as api

log = structlog.get_logger("nri_pinner.nics")

NICS_ANNOTATION = "nri-pinner.io/nics"
LOOKUP_WAIT_SECONDS = 0.2  # well inside the create budget (runtime timeout 2 s minus the margin)
CONCURRENT_LOOKUPS = 4  # a Synchronize starts one per running pod: keep netlink and threads bounded
STACKED_KINDS = frozenset({"macvlan", "macvtap", "ipvlan", "ipvtap", "vlan"})
MAX_STACK_DEPTH = 4
IFF_LOOPBACK = 0x8
IFNAMSIZ = 16
SIOCETHTOOL, ETHTOOL_GDRVINFO = 0x8946, 0x3
DRVINFO_SIZE, BUS_INFO_OFFSET = 196, 100  # struct ethtool_drvinfo: cmd, driver/version/fw_version[32], bus_info


class NicAnnotationError(ValueError):
    """A malformed ``nri-pinner.io/nics`` annotation (the message quotes it)."""


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
class SandboxNics:
    sandbox_id: str
    pod_key: str
    netns: str  # "" = the host's namespace (host-network pod)
    links: tuple[NicLink, ...] = ()
    problem: str = ""  # the lookup failed or an annotated interface is missing
    seconds: float = 0.0

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        """One NUMA node per interface that has one (the NIC provider's input)."""
        return tuple(link.numa for link in self.links if link.numa is not None)

    def to_json(self) -> dict[str, Any]:
        return {"sandbox_id": self.sandbox_id, "pod": self.pod_key, "netns": self.netns or "host",
                "links": [link.to_json() for link in self.links], "numa": list(self.numa_nodes),
                "problem": self.problem, "lookup_ms": round(self.seconds * 1000, 3)}


def pod_key(pod: api.PodSandbox) -> str:
    return pod.uid or pod.name  # the same key as the container intent's


def pod_netns_path(pod: api.PodSandbox) -> str:
    """The network namespace path from the sandbox's Linux namespaces; "" for host-network pods."""
    for ns in pod.linux.namespaces:
        if ns.type == "network":
            return ns.path
    return ""


def annotated_names(pod: api.PodSandbox) -> tuple[str, ...] | None:
    """Interface names from ``nri-pinner.io/nics`` (``None`` when absent)."""
    text = pod.annotations.get(NICS_ANNOTATION)
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(","))
    bad = [n for n in names if not n or len(n) >= IFNAMSIZ or "/" in n or any(c.isspace() for c in n)]
    if bad or len(set(names)) != len(names):
        raise NicAnnotationError(f"{NICS_ANNOTATION}: {text!r}: expected distinct interface names like "
                                 '"eth1,eth2"')
    return names


# -- reading links (runs on the lookup's own thread) ----------------------------------------------


def read_links(netns_path: str, sysfs_root: str, names: Sequence[str] | None = None, *,
               parent_attrs: bool = True) -> tuple[NicLink, ...]:
    """The links of a namespace and their devices. With ``netns_path`` this moves the calling thread
    into that namespace for good: call it only on a thread that ends afterwards. ``parent_attrs=False``
    reads devices through ethtool only, as on kernels that do not report ``IFLA_PARENT_DEV_*``."""
    host_fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        # opened before the switch: these stay bound to the host namespace
        with IPRoute() as host, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as host_io:
            if netns_path:
                fd = os.open(netns_path, os.O_RDONLY)
                try:
                    netns.setns(fd, flags=0)
                finally:
                    os.close(fd)
            with IPRoute() as inside, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as inside_io:
                ctx = _Sides(inside, inside_io, host, host_io, _nsid_of(inside, host_fd) if netns_path else None,
                             sysfs_root, parent_attrs)
                found = [_describe(link, ctx)
                         for link in inside.get_links() if not int(link.get("flags", 0)) & IFF_LOOPBACK]
    finally:
        os.close(host_fd)
    if names is None:
        return tuple(found)
    by_name = {link.name: link for link in found}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise LookupError(f"interface(s) {', '.join(missing)} not found")
    return tuple(by_name[n] for n in names)


@dataclass(frozen=True)
class _Sides:
    inside: IPRoute
    inside_io: socket.socket  # for ethtool ioctls, bound to the pod's namespace
    host: IPRoute
    host_io: socket.socket
    host_nsid: int | None  # the host namespace's id as the pod's namespace sees it
    root: str
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


def _describe(link: Any, ctx: _Sides) -> NicLink:
    name = str(link.get("ifname"))
    kind = str(link.get(("IFLA_LINKINFO", "IFLA_INFO_KIND")) or "device")
    current, sock, io, via = link, ctx.inside, ctx.inside_io, ""
    for _ in range(MAX_STACK_DEPTH):
        bus, dev = _parent(current, io, ctx)
        if bus and dev:
            placed = place_device(ctx.root, bus, dev)
            note = placed.note + (f" (via {via})" if via and placed.note else "")
            return NicLink(name, "vf" if placed.vf and kind == "device" else kind, placed.pci, placed.numa, note)
        lower_kind = current.get(("IFLA_LINKINFO", "IFLA_INFO_KIND"))
        lower_index = current.get("IFLA_LINK")
        if lower_kind not in STACKED_KINDS or not lower_index:
            break
        nsid = current.get("IFLA_LINK_NETNSID")
        if nsid is not None:
            if nsid != ctx.host_nsid or sock is ctx.host:
                return NicLink(name, kind, note=f"{lower_kind} on a link in another network namespace")
            sock, io = ctx.host, ctx.host_io
        lowers = sock.get_links(int(lower_index))
        if not lowers:
            return NicLink(name, kind, note=f"{lower_kind}: lower link {lower_index} not found")
        current = lowers[0]
        via = f"{current.get('ifname')}" if not via else f"{via}/{current.get('ifname')}"
    note = "virtual link, no device" if not via else f"lower link {via} has no device"
    return NicLink(name, kind, note=f"{kind}: {note}")


# -- the per-sandbox cache ----------------------------------------------------------------------

Reader = Callable[[str, str, Sequence[str] | None], tuple[NicLink, ...]]


class NicLookup:
    """Sandbox NICs, looked up once per sandbox in the background and cached until RemovePodSandbox.

    Its dictionaries change only on the node thread (the NRI handlers and the NIC provider run there);
    the lookups themselves run on threads of their own and only complete a future; `snapshot` (status,
    another thread) reads a copy. No lock: the provider's read in the middle of an admission never waits.
    """

    def __init__(self, sysfs_root: str = "/", wait_seconds: float = LOOKUP_WAIT_SECONDS,
                 reader: Reader = read_links, on_late: Callable[[], None] | None = None) -> None:
        self.sysfs_root, self.wait_seconds, self._reader, self.on_late = sysfs_root, wait_seconds, reader, on_late
        self._slots = threading.BoundedSemaphore(CONCURRENT_LOOKUPS)
        self._pending: dict[str, Future[SandboxNics]] = {}  # by sandbox id
        self._by_pod: dict[str, str] = {}  # pod key -> sandbox id
        self.late = 0

    def start(self, pod: api.PodSandbox) -> Future[SandboxNics]:
        """Begin the sandbox's lookup unless it is known (idempotent; never blocks)."""
        future = self._pending.get(pod.id)
        if future is not None:
            return future
        future = self._pending[pod.id] = Future()
        self._by_pod[pod_key(pod)] = pod.id
        path, key = pod_netns_path(pod), pod_key(pod)
        try:
            names = annotated_names(pod)
        except NicAnnotationError as exc:
            future.set_result(SandboxNics(pod.id, key, path, problem=str(exc)))
            log.warning("NIC annotation refused; no NIC hints for this pod", pod=key, error=str(exc))
            return future
        if not path and names is None:  # host network and nothing named: no constraint
            future.set_result(SandboxNics(pod.id, key, ""))
            return future
        threading.Thread(target=self._run, args=(future, pod.id, key, path, names),
                         name=f"nri-pinner-netns-{pod.id[:12]}", daemon=True).start()
        return future

    def _run(self, future: Future[SandboxNics], sandbox: str, key: str, path: str,
             names: tuple[str, ...] | None) -> None:
        with self._slots:
            started = time.perf_counter()
            try:
                links, problem = self._reader(path, self.sysfs_root, names), ""
            except Exception as exc:
                links, problem = (), f"NIC lookup failed: {exc}"
        result = SandboxNics(sandbox, key, path, links, problem, time.perf_counter() - started)
        if problem:
            log.warning("NIC lookup failed; no NIC hints for this pod", pod=key, netns=path or "host", error=problem)
        else:
            log.info("pod NICs", pod=key, netns=path or "host", numa=list(result.numa_nodes),
                     links=[f"{x.name}:{x.pci or '-'}:{x.numa if x.numa is not None else '-'}" for x in links])
        future.set_result(result)

    def wait(self, pod: api.PodSandbox) -> SandboxNics | None:
        """The sandbox's NICs, waiting at most ``wait_seconds`` for a lookup still running."""
        future = self.start(pod)
        try:
            return future.result(timeout=self.wait_seconds)
        except TimeoutError:
            self.note_late(pod)
            return None

    def note_late(self, pod: api.PodSandbox) -> None:
        """A create waited ``wait_seconds`` for this pod's lookup: it goes on without NIC hints."""
        self.late += 1
        if self.on_late is not None:
            self.on_late()
        log.warning("NIC lookup not finished in time; container admitted without NIC hints",
                    pod=pod_key(pod), wait_seconds=self.wait_seconds)

    def numa_nodes(self, key: str) -> tuple[int, ...] | None:
        """The pod's NIC NUMA nodes if its lookup is done (the provider's source; never blocks)."""
        future = self._pending.get(self._by_pod.get(key, ""))
        if future is None or not future.done():
            return None
        return future.result().numa_nodes

    def forget(self, sandbox_id: str) -> None:
        self._pending.pop(sandbox_id, None)
        for key in [k for k, s in self._by_pod.items() if s == sandbox_id]:
            del self._by_pod[key]

    def snapshot(self) -> list[dict[str, Any]]:
        """Finished lookups for ``status`` (pending ones are listed as such)."""
        items = sorted(dict(self._pending).items())  # a copy: the node thread may add one meanwhile
        out = []
        for sandbox, future in items:
            out.append(future.result().to_json() if future.done() else {"sandbox_id": sandbox, "pending": True})
        return out
