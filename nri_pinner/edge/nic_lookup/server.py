"""The NIC lookup service, ``nri-pinner nic-lookup-server``: lists a pod network namespace's links for the
plugin, which may not enter namespaces itself (``client``).

The one piece of nri-pinner that holds a capability: ``CAP_SYS_ADMIN``, for ``setns()`` (the systemd
unit ``nri-pinner-nic-lookup.service`` grants that one only, with ``RestrictNamespaces=net``; the
DaemonSet's ``nic-lookup`` container, from ``components/nic-lookup``, adds ``SYS_ADMIN`` only). It
reads no sysfs and writes nothing but its socket. Per connection: one request, one reply
(``protocol``); each lookup runs the plugin's own `read_devices` on a thread of its own that
enters the namespace and then ends.

Bounded, whatever a client does: it has ``READ_SECONDS`` to send its request; a lookup has
``LOOKUP_SECONDS`` (then an error reply; its thread is counted until it ends); at most
``MAX_CONNECTIONS`` connections are served at once and ``MAX_LOOKUPS`` lookup threads live, beyond
which a request gets a "busy" reply at once. A bad request gets an error reply and the service goes on.
Only root (or its own uid) may ask (``SO_PEERCRED``; the socket is 0600 besides).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import structlog

from .client import DEFAULT_SOCKET, SOCKET_ENV, recv_exact
from .netns import LinkDevice, read_devices
from .protocol import HEADER, MAX_REQUEST, ProtocolError, decode_request, encode_error, encode_links, frame_length

log = structlog.get_logger("nri_pinner.nic_lookup_server")

READ_SECONDS = 1.0
LOOKUP_SECONDS = 2.0
MAX_CONNECTIONS = 8
MAX_LOOKUPS = 16
CAP_SYS_ADMIN = 21

Lookup = Callable[[str], Sequence[LinkDevice]]


class LookupServer:
    """The listening socket and its connections; `serve_forever` until `stop`."""

    def __init__(self, socket_path: str, lookup: Lookup = read_devices, *, read_seconds: float = READ_SECONDS,
                 lookup_seconds: float = LOOKUP_SECONDS) -> None:
        self.socket_path, self._lookup = socket_path, lookup
        self.read_seconds, self.lookup_seconds = read_seconds, lookup_seconds
        self._listener: socket.socket | None = None
        self._stopping = threading.Event()
        self._connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._lock = threading.Lock()
        self.lookups_running = 0

    def bind(self) -> None:
        """Listen on the socket path (0600), replacing a socket a previous run left."""
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(self.socket_path).st_mode):
                os.unlink(self.socket_path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old = os.umask(0o177)
        try:
            listener.bind(self.socket_path)
        except OSError:
            listener.close()
            raise
        finally:
            os.umask(old)
        listener.listen(64)
        listener.settimeout(0.25)  # how soon `stop` is seen
        self._listener = listener

    def serve_forever(self) -> None:
        if self._listener is None:
            self.bind()
        listener = self._listener
        assert listener is not None
        try:
            while not self._stopping.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                if not self._connections.acquire(blocking=False):
                    with conn:
                        self._send(conn, encode_error(f"busy: {MAX_CONNECTIONS} connections being served"))
                    continue
                threading.Thread(target=self._serve_one, args=(conn,), name="nic-lookup-conn", daemon=True).start()
        finally:
            listener.close()
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)

    def stop(self) -> None:
        self._stopping.set()

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            with conn:
                self._send(conn, self.answer(conn))
        except Exception as exc:  # one client's trouble (gone, misbehaving) is not the service's
            log.info("NIC lookup connection dropped", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._connections.release()

    def _send(self, conn: socket.socket, reply: bytes) -> None:
        conn.settimeout(self.read_seconds)
        conn.sendall(reply)

    def answer(self, conn: socket.socket) -> bytes:
        """The reply to the request on ``conn``."""
        uid = peer_uid(conn)
        if uid not in (0, os.geteuid()):
            return encode_error(f"uid {uid} may not ask")
        deadline = time.monotonic() + self.read_seconds
        try:
            length = frame_length(recv_exact(conn, HEADER.size, deadline), MAX_REQUEST)
            netns = decode_request(recv_exact(conn, length, deadline))
        except ProtocolError as exc:
            log.warning("NIC lookup request refused", error=str(exc))
            return encode_error(f"bad request: {exc}")
        except TimeoutError:
            return encode_error(f"bad request: not sent within {self.read_seconds:g} s")
        return self.look_up(netns)

    def look_up(self, netns: str) -> bytes:
        """The reply for one checked netns path: its links, or why not, within ``lookup_seconds``."""
        with self._lock:
            if self.lookups_running >= MAX_LOOKUPS:
                return encode_error(f"busy: {MAX_LOOKUPS} lookups still running")
            self.lookups_running += 1
        began = time.perf_counter()
        done: Future[Sequence[LinkDevice]] = Future()
        threading.Thread(target=self._run, args=(netns, done), name="nic-lookup-netns", daemon=True).start()
        try:
            links = done.result(timeout=self.lookup_seconds)
        except TimeoutError:
            log.warning("NIC lookup over its deadline", netns=netns, seconds=self.lookup_seconds)
            return encode_error(f"lookup of {netns} did not finish within {self.lookup_seconds:g} s")
        except Exception as exc:
            text = str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
            log.info("NIC lookup failed", netns=netns, error=text)
            return encode_error(text)
        log.debug("NIC lookup", netns=netns, links=len(links), ms=round((time.perf_counter() - began) * 1000, 2))
        try:
            return encode_links(links)
        except ProtocolError as exc:
            return encode_error(f"{len(links)} links: {exc}")

    def _run(self, netns: str, done: Future[Sequence[LinkDevice]]) -> None:
        try:
            done.set_result(self._lookup(netns))
        except BaseException as exc:
            done.set_exception(exc)
        finally:
            with self._lock:
                self.lookups_running -= 1


def peer_uid(conn: socket.socket) -> int:
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return int(uid)


def warm_up() -> None:
    """One read of this process's own namespace (no setns) before the first request: netlink's first use
    costs ~150 ms (imports, setup), which would otherwise fall on the plugin's first lookup, most likely
    one a create is waiting for."""
    def read_own() -> None:
        with contextlib.suppress(Exception):
            read_devices("")

    thread = threading.Thread(target=read_own, daemon=True)
    thread.start()
    thread.join(LOOKUP_SECONDS)


def can_setns() -> bool:
    """Whether CAP_SYS_ADMIN is in this process's effective set (setns needs it; a seccomp filter may
    still refuse)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            line = next(ln for ln in f if ln.startswith("CapEff:"))
    except (OSError, StopIteration):
        return False
    return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)


def serve_main(socket_path: str | None = None) -> int:
    """``nri-pinner nic-lookup-server``: serve until SIGTERM/SIGINT (0); 1 when it cannot listen."""
    from ..observe import logs, readiness

    logs.configure()
    path = socket_path or os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET
    server = LookupServer(path)
    try:
        os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
        server.bind()
    except OSError as exc:
        log.error("NIC lookup service cannot listen", socket=path, error=str(exc))
        return 1

    def stop(_signum: int, _frame: Any) -> None:
        server.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    began = time.perf_counter()
    warm_up()
    if not can_setns():
        log.warning("no CAP_SYS_ADMIN: every lookup will be refused (systemd: CapabilityBoundingSet=CAP_SYS_ADMIN; "
                    "Kubernetes: capabilities.add [SYS_ADMIN])")
    log.info("NIC lookup service listening", socket=path, pid=os.getpid(),
             warm_up_ms=round((time.perf_counter() - began) * 1000, 1))
    notifier = readiness.from_env(os.environ)  # Type=notify: ready once the socket listens
    if notifier is not None:
        notifier.send("READY=1", f"STATUS=listening on {path}")
        notifier.close()
    server.serve_forever()
    log.info("NIC lookup service stopped", socket=path)
    return 0
