"""The metrics listener: /metrics, /healthz (alive) and /readyz (pinning), 404 for any other path;
HEAD answers as GET without the body.

/healthz asks the service's event loop (the one that answers the runtime) to run a no-op: a wedged
loop fails the liveness probe, a slow scrape or a disconnected runtime does not. /readyz is 200 only
while registered with the runtime and synchronized, i.e. while new containers get their cpusets.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .metrics import Metrics

ALIVE_TIMEOUT = 2.0  # seconds the event loop may take to run a no-op before /healthz fails


def readiness(metrics: Metrics) -> tuple[bool, str]:
    if not metrics.connected:
        return False, "not ready: not connected to the runtime's NRI socket"
    if not metrics.synchronized:
        return False, "not ready: connected, waiting for the runtime's Synchronize"
    return True, "ready: registered and synchronized"


def liveness(loop: asyncio.AbstractEventLoop | None, timeout: float = ALIVE_TIMEOUT) -> tuple[bool, str]:
    if loop is None:
        return True, "ok"
    if loop.is_closed():
        return False, "dead: the service's event loop is closed"
    future = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop)
    try:
        future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        return False, f"dead: the service's event loop did not answer within {timeout:g}s"
    return True, "ok"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], metrics: Metrics, loop: asyncio.AbstractEventLoop | None,
                 alive_timeout: float) -> None:
        # the family of what the address is or resolves to (a host name may resolve to IPv6 only)
        found = socket.getaddrinfo(address[0], address[1], type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        self.address_family = found[0][0]
        self.metrics, self.loop, self.alive_timeout = metrics, loop, alive_timeout
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    _head_only = False

    def do_HEAD(self) -> None:
        """As GET, without the body (curl -I, load balancers' checks)."""
        self._head_only = True
        self.do_GET()

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        srv = self.server
        if path == "/metrics":
            self._reply(200, generate_latest(srv.metrics.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            ok, text = liveness(srv.loop, srv.alive_timeout)
            self._reply(200 if ok else 503, f"{text}\n".encode())
        elif path == "/readyz":
            ok, text = readiness(srv.metrics)
            self._reply(200 if ok else 503, f"{text}\n".encode())
        else:
            self._reply(404, b"not found: /metrics, /healthz, /readyz\n")

    def _reply(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not self._head_only:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Probes hit this every few seconds: no access log."""


class Listener:
    """The HTTP server on its own daemon thread; `port` 0 picks a free port (see `.port`)."""

    def __init__(self, metrics: Metrics, address: str, port: int, loop: asyncio.AbstractEventLoop | None = None,
                 alive_timeout: float = ALIVE_TIMEOUT) -> None:
        self._server = _Server((address, port), metrics, loop, alive_timeout)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="nri-pinner-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
