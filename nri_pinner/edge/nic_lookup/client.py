"""Reading a pod's links from the main process, which may not enter network namespaces itself.

Entering one is ``setns()``, which needs ``CAP_SYS_ADMIN`` and is refused under systemd's
``RestrictNamespaces=yes`` whatever the capabilities; the hardened unit and the DaemonSet's plugin
container have neither. So `NetnsReader`, `NicLookup`'s default reader, asks the NIC lookup service
(``nri-pinner nic-lookup-server``: a separate process holding only ``CAP_SYS_ADMIN``) over its unix
socket, and places the devices it reports on this process's sysfs root. Where no service answers it
enters the namespace itself (a plugin running as plain root: pre-installed mode, tests), and where
that is refused too the lookup fails with one line naming the fix. The host's own namespace (a
host-network pod's annotated NICs) needs no setns and is always read here.

The socket: ``/run/nri-pinner-nic-lookup/nic-lookup.sock`` (the lookup unit's runtime directory; in
the DaemonSet, with components/nic-lookup, an emptyDir both containers mount there), or
``$NRI_PINNER_NIC_LOOKUP_SOCKET`` ("" = never ask a service).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Sequence

from .netns import LinkDevice, NicLink, SetnsRefused, place_link, read_links, select
from .protocol import HEADER, MAX_REPLY, ProtocolError, decode_reply, encode_request, frame_length

DEFAULT_SOCKET = "/run/nri-pinner-nic-lookup/nic-lookup.sock"
SOCKET_ENV = "NRI_PINNER_NIC_LOOKUP_SOCKET"
CLIENT_SECONDS = 3.0  # one exchange; past the service's own lookup deadline (2 s), well past a normal answer
FIX = ("fix: start nri-pinner-nic-lookup.service (the .deb's; nri-pinner.service wants it), or in the DaemonSet "
       "add components/nic-lookup (its nic-lookup container)")


class ServiceUnavailable(ConnectionError):
    """No lookup service answered: the socket is missing, refused the connection, or broke the protocol."""


def ask(socket_path: str, netns: str, timeout: float = CLIENT_SECONDS) -> tuple[LinkDevice, ...]:
    """The links of ``netns`` from the service at ``socket_path``. ServiceError: the service's lookup
    failed (its text); ServiceUnavailable: no usable answer."""
    request = encode_request(netns)  # ProtocolError for a path the service would refuse
    deadline = time.monotonic() + timeout
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(timeout)
            sock.connect(socket_path)
            # answered (a refusal) before it read the request: its reply says why
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(request)
            length = frame_length(recv_exact(sock, HEADER.size, deadline), MAX_REPLY)
            payload = recv_exact(sock, length, deadline)
    except TimeoutError:
        raise ServiceUnavailable(f"no answer from {socket_path} within {timeout:g} s") from None
    except (OSError, ProtocolError) as exc:
        raise ServiceUnavailable(f"{socket_path}: {exc}") from exc
    try:
        return decode_reply(payload)
    except ProtocolError as exc:
        raise ServiceUnavailable(f"{socket_path}: {exc}") from exc


def recv_exact(sock: socket.socket, size: int, deadline: float) -> bytes:
    """Exactly ``size`` bytes, by ``deadline`` (TimeoutError); ProtocolError when the peer closes first."""
    chunks, have = [], 0
    while have < size:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(min(size - have, 1 << 16))
        if not chunk:
            raise ProtocolError(f"connection closed after {have} of {size} bytes")
        chunks.append(chunk)
        have += len(chunk)
    return b"".join(chunks)


class NetnsReader:
    """`NicLookup`'s default reader (called on the lookup's own thread): the lookup service when one
    answers, else this process's own setns, else a LookupError naming the fix."""

    def __init__(self, socket_path: str | None = None, timeout: float = CLIENT_SECONDS) -> None:
        self.socket_path = os.environ.get(SOCKET_ENV, DEFAULT_SOCKET) if socket_path is None else socket_path
        self.timeout = timeout

    def __call__(self, netns_path: str, sysfs_root: str, names: Sequence[str] | None) -> tuple[NicLink, ...]:
        if not netns_path:  # the host's own namespace: nothing to enter
            return read_links("", sysfs_root, names)
        service = f"is turned off (${SOCKET_ENV} is empty)"
        if self.socket_path:
            try:
                devices = ask(self.socket_path, netns_path, self.timeout)
            except (ServiceUnavailable, ProtocolError) as exc:
                service = f"could not be used ({exc})"
            else:
                return tuple(place_link(link, sysfs_root) for link in select(devices, names))
        try:
            return read_links(netns_path, sysfs_root, names)
        except SetnsRefused:
            raise LookupError(f"cannot enter the pod's network namespace: setns() is not permitted here (no "
                              f"CAP_SYS_ADMIN, or systemd's RestrictNamespaces) and the NIC lookup service "
                              f"{service}; {FIX}") from None
