"""CPU hotplug as it happens: the kernel's uevents (netlink, NETLINK_KOBJECT_UEVENT).

A CPU coming online must join the shared pool (cgroup v1 never adds it back to any cpuset by
itself), and one going offline must leave the exclusive sets: waiting for the repair timer would
leave the pool short (or a container on a dead CPU) for up to a period. The kernel announces both
(`online@/devices/system/cpu/cpuN`, `offline@…`) to netlink group 1; a message only says
"look again" — the online list is read from sysfs, so a lost or foreign message costs nothing.

pyroute2 (a dependency) offers a `UeventSocket`, but it runs its own event loop machinery; the
stdlib's AF_NETLINK datagram socket on the service's loop (`add_reader`) is all this needs.
Needs root (or CAP_NET_ADMIN in some containers); without the socket the repair timer still checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger("nri_pinner.reconcile")

NETLINK_KOBJECT_UEVENT = 15  # linux/netlink.h (not exported by the socket module)
KERNEL_GROUP = 1  # the kernel's own messages (2 = udev's re-broadcasts)
CPU_ACTIONS = frozenset({"online", "offline", "add", "remove", "change"})
SETTLE_SECONDS = 0.05  # a hotplug of many CPUs is many messages: one look after they stop


def parse(data: bytes) -> dict[str, str]:
    """One kernel uevent ("action@devpath\\0KEY=value\\0..."): its KEY=value pairs."""
    out: dict[str, str] = {}
    for field in data.split(b"\0")[1:]:
        key, sep, value = field.partition(b"=")
        if sep and key:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def is_cpu_event(event: dict[str, str]) -> bool:
    return event.get("SUBSYSTEM") == "cpu" and event.get("ACTION") in CPU_ACTIONS


def open_socket() -> socket.socket | None:
    """The kernel uevent socket, non-blocking; None (logged) when this process may not open it."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                             NETLINK_KOBJECT_UEVENT)
    except OSError as exc:
        log.info("no kernel uevents: CPU hotplug is noticed by the repair timer only", error=str(exc))
        return None
    try:
        sock.bind((0, KERNEL_GROUP))
    except OSError as exc:
        sock.close()
        log.info("no kernel uevents: CPU hotplug is noticed by the repair timer only", error=str(exc))
        return None
    return sock


async def watch_cpus(sock: socket.socket, changed: Callable[[], Awaitable[None]],
                     settle: float = SETTLE_SECONDS) -> None:
    """Call `changed` after every burst of CPU uevents (until cancelled); owns and closes `sock`."""
    loop = asyncio.get_running_loop()
    seen = asyncio.Event()

    def readable() -> None:
        while True:
            try:
                data = sock.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError as exc:  # ENOBUFS: messages were lost — look anyway
                log.debug("uevent socket", error=str(exc))
                seen.set()
                return
            if is_cpu_event(parse(data)):
                seen.set()

    loop.add_reader(sock.fileno(), readable)
    try:
        while True:
            await seen.wait()
            await asyncio.sleep(settle)
            seen.clear()
            try:
                await changed()
            except Exception as exc:  # the watcher must survive anything one look meets
                log.error("CPU hotplug check failed", error=repr(exc))
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(sock.fileno())
        sock.close()
