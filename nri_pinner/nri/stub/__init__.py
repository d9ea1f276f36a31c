"""asyncio NRI plugin stub, modelled on containerd/nri ``pkg/stub``.

The plugin object implements only the handlers it needs; the stub owns the connection, registration,
dispatch and the wire. Each handler is declared by a ``Protocol`` in :mod:`nri_pinner.nri.handlers`
(mypy checks a plugin against them; the stub discovers them with ``isinstance``). Handlers (sync or
async; all run on the stub's handler thread):

* ``configure(req) -> int | None`` — optional event mask (subset of the handled ones)
* ``synchronize(pods, containers) -> UpdatesReply | Sequence[ContainerUpdate] | None``
* ``create_container(req) -> CreateReply | CreateContainerResponse``; ``update_container`` and
  ``stop_container`` ``-> UpdatesReply | <Event>Response``; ``update_pod_sandbox`` and
  ``validate_container_adjustment`` ``-> <Event>Response | None``. The stub builds the NRI response
  from a typed reply (:mod:`nri_pinner.nri.stub.replies`); raw responses pass through.
* state events, each ``(event: StateChangeEvent) -> None``: ``run_pod_sandbox``, ``stop_pod_sandbox``,
  ``remove_pod_sandbox``, ``post_create_container``, ``start_container``, ``post_start_container``,
  ``post_update_container``, ``remove_container``, ``post_update_pod_sandbox``, or a catch-all
  ``state_change``. NRI v0.12's dedicated RPCs and the older ``StateChange`` reach the same handler.
* any handler may instead return a ``ParkedReply`` and resolve it later from another
  call on the handler thread: the runtime gets the answer when it resolves, within the budget.
* ``shutdown()``, ``on_connect()`` (before registering) and ``on_close()`` (after a connection ends):
  hooks to rebuild state per connection.
* ``fallback_<handler>(same args)`` — sync, quick, runs on the wire loop: the answer sent when
  ``<handler>`` overruns its budget (default: an empty response); raising sends an error status.
* ``discarded_reply(handler: str, args: tuple, outcome: object)`` — told about late answers
  (including a ParkedReply resolved after the budget).

The handler thread is the stub's own (created and stopped by :meth:`Stub.run`) unless one is passed
as ``handler_thread``: then its owner starts and stops it and may submit its own calls to it.

Unhandled or unknown methods are answered with Unimplemented (12); a v0.12 runtime then falls back
to StateChange.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from nri_pinner.nri import codec, versions
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import bound_handler
from nri_pinner.nri.stub.dispatch import (
    DEFAULT_REGISTRATION_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    PLUGIN_SERVICE,
    RUNTIME_SERVICE,
    Dispatcher,
    StubStats,
)
from nri_pinner.nri.stub.handler_calls import HandlerThread, call_with_budget, event_names
from nri_pinner.nri.stub.wire import KvLogger, PeerClosedError, TtrpcPeer, TtrpcStatusError

__all__ = [
    "DEFAULT_SOCKET_PATH",
    "PLUGIN_SERVICE",
    "RUNTIME_SERVICE",
    "HandlerThread",
    "NotConnectedError",
    "PluginConnectionLost",
    "Stub",
    "StubStats",
]

DEFAULT_SOCKET_PATH = "/var/run/nri/nri.sock"
PLUGIN_NRI_VERSION = "v0.12.1"  # API level this stub speaks (the runtime only logs it)

_NAME_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")
_IDX_RE = re.compile(r"^[0-9]{2}$")


class PluginConnectionLost(Exception):
    """Pre-installed mode: the runtime's socket closed; containerd never relaunches us, so exit."""


class NotConnectedError(ConnectionError):
    """A runtime call was attempted while no runtime connection is up."""


class Stub:
    """Connects a plugin object to an NRI runtime and keeps it connected (external mode)."""

    def __init__(
        self,
        plugin: object,
        *,
        name: str | None = None,
        idx: str | None = None,
        socket_path: str | None = None,
        env: Mapping[str, str] | None = None,
        logger: Any = None,
        budget_margin: float = 0.3,
        default_request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        registration_timeout: float = DEFAULT_REGISTRATION_TIMEOUT,
        backoff_initial: float = 0.5,
        backoff_max: float = 10.0,
        handler_thread: HandlerThread | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self._fd: int | None = None
        if socket_path is None and env.get("NRI_PLUGIN_SOCKET"):
            # Launched by the runtime: fd, name and index all come from the environment.
            fd_text = env["NRI_PLUGIN_SOCKET"]
            if not fd_text.isdigit():
                raise ValueError(f"NRI_PLUGIN_SOCKET must be a file descriptor number, got {fd_text!r}")
            self._fd = int(fd_text)
            name, idx = env.get("NRI_PLUGIN_NAME", ""), env.get("NRI_PLUGIN_IDX", "")
        if not name or not _NAME_RE.match(name):
            raise ValueError(f"plugin name must be non-empty and match [A-Za-z0-9_.+-]+, got {name!r}")
        if not idx or not _IDX_RE.match(idx):
            raise ValueError(f"plugin index must be exactly two digits, got {idx!r}")
        if budget_margin < 0 or backoff_initial <= 0 or backoff_max < backoff_initial:
            raise ValueError("need budget_margin >= 0 and 0 < backoff_initial <= backoff_max")
        self.name, self.idx = name, idx
        self.socket_path = socket_path or DEFAULT_SOCKET_PATH
        self.backoff_initial, self.backoff_max = backoff_initial, backoff_max
        self._plugin = plugin
        self._handler_thread = handler_thread  # owned by the caller: used, never created or stopped
        self._log = KvLogger(logger, "nri_pinner.nri.stub")
        self._dispatch = Dispatcher(
            plugin, self.full_name, self._log, budget_margin=budget_margin,
            request_timeout=default_request_timeout, registration_timeout=registration_timeout,
        )
        self._peer: TtrpcPeer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = asyncio.Event()

    # ----------------------------------------------------------------------------- status

    @property
    def full_name(self) -> str:
        return f"{self.idx}-{self.name}"

    @property
    def preinstalled(self) -> bool:
        return self._fd is not None

    @property
    def stats(self) -> StubStats:
        return self._dispatch.stats

    @property
    def handled_events(self) -> int:
        return self._dispatch.handled_events

    @property
    def events(self) -> int:
        """Event mask sent in the last ConfigureResponse."""
        return self._dispatch.events

    @property
    def runtime_name(self) -> str:
        return self._dispatch.runtime_name

    @property
    def runtime_version(self) -> str:
        return self._dispatch.runtime_version

    @property
    def runtime_nri_version(self) -> versions.NriVersion | None:
        return self._dispatch.runtime_nri_version

    @property
    def request_timeout(self) -> float:
        return self._dispatch.request_timeout

    @property
    def registration_timeout(self) -> float:
        return self._dispatch.registration_timeout

    @property
    def request_budget(self) -> float:
        return self._dispatch.budget()

    @property
    def connected(self) -> bool:
        return self._peer is not None and not self._peer.closed

    @property
    def synchronized(self) -> bool:
        return self.connected and self._dispatch.synchronized

    @property
    def supports_safe_unsolicited_updates(self) -> bool:
        """True only for NRI >= v0.12.1, where UpdateContainers cannot deadlock the runtime."""
        return versions.safe_unsolicited_updates(self.runtime_nri_version)

    def status(self) -> dict[str, Any]:
        return {
            "plugin": self.full_name,
            "mode": "pre-installed" if self.preinstalled else "external",
            "socket": f"fd {self._fd}" if self._fd is not None else self.socket_path,
            "connected": self.connected,
            "synchronized": self.synchronized,
            "runtime_name": self.runtime_name,
            "runtime_version": self.runtime_version,
            "runtime_nri_version": versions.format_version(self.runtime_nri_version),
            "runtime_nri_version_source": self._dispatch.runtime_nri_version_source,
            "safe_unsolicited_updates": self.supports_safe_unsolicited_updates,
            "registration_timeout_s": self.registration_timeout,
            "request_timeout_s": self.request_timeout,
            "request_budget_s": self.request_budget,
            "events": event_names(self.events),
            "stats": self.stats.as_dict(),
        }

    # ----------------------------------------------------------------------------- lifecycle

    async def run(self) -> None:
        """Connect, register and serve; reconnect with backoff (external mode) until :meth:`stop`.

        Pre-installed mode raises PluginConnectionLost when the inherited socket closes.
        """
        self._loop = asyncio.get_running_loop()
        own_thread = self._handler_thread is None
        handlers = self._handler_thread or HandlerThread(f"nri-{self.full_name}")
        self._dispatch.handlers = handlers
        backoff = self.backoff_initial
        try:
            while not self._stopping.is_set():
                try:
                    reader, writer = await self._open()
                except OSError as exc:
                    if self.preinstalled:
                        raise PluginConnectionLost(f"cannot use NRI socket fd {self._fd}: {exc}") from exc
                    self._log.warning("cannot connect to runtime", socket=self.socket_path,
                                      error=str(exc), retry_in_s=backoff)
                else:
                    if await self._serve_connection(reader, writer):
                        backoff = self.backoff_initial  # a good registration resets the backoff
                    if self._stopping.is_set():
                        break
                    if self.preinstalled:
                        self._log.error("runtime connection lost; pre-installed plugin exits",
                                        plugin=self.full_name)
                        raise PluginConnectionLost("NRI runtime connection closed")
                    self._log.info("reconnecting", plugin=self.full_name, in_s=backoff)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), backoff)
                backoff = min(backoff * 2, self.backoff_max)
        finally:
            if own_thread:
                handlers.stop()
            self._stopping.clear()  # run() may be called again after stop()

    async def stop(self) -> None:
        """Make :meth:`run` return; closes the current connection."""
        self._stopping.set()
        if self._peer is not None:
            self._peer.close("plugin stopping")

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._fd is None:
            return await asyncio.open_unix_connection(self.socket_path)
        if self.stats.connections:
            raise OSError(f"inherited socket fd {self._fd} was already used")
        return await asyncio.open_unix_connection(sock=socket.socket(fileno=self._fd))

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One connection from RegisterPlugin to close; True if it got synchronized."""
        self.stats.bump("connections")
        self._dispatch.new_connection()
        peer = self._peer = TtrpcPeer(
            reader, writer, serve_conn=codec.PLUGIN_SERVICE_CONN, call_conn=codec.RUNTIME_SERVICE_CONN,
            handler=self._dispatch.handle, logger=self._log, name=self.full_name,
        )
        reader_task = asyncio.create_task(peer.run())
        await self._hook("on_connect")
        register = api.RegisterPluginRequest(
            plugin_name=self.name, plugin_idx=self.idx, NRI_version=PLUGIN_NRI_VERSION
        )
        watchdog: asyncio.Task[None] | None = None
        try:
            await peer.call(RUNTIME_SERVICE, "RegisterPlugin", register.SerializeToString(),
                            self.registration_timeout)
            self.stats.bump("registrations")
            self._log.info("registered with runtime", plugin=self.full_name)
            watchdog = asyncio.create_task(self._await_configure(peer))
        except (TtrpcStatusError, PeerClosedError, TimeoutError) as exc:
            peer.close(f"registration failed: {exc!r}")
        stopping = asyncio.create_task(self._stopping.wait())
        await asyncio.wait({reader_task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if watchdog is not None:
            watchdog.cancel()
        await peer.aclose()
        reader_task.cancel()
        await asyncio.gather(reader_task, stopping, return_exceptions=True)
        synchronized = self._dispatch.synchronized
        self._peer = None
        await self._hook("on_close")
        return synchronized

    async def _await_configure(self, peer: TtrpcPeer) -> None:
        """A runtime that accepted RegisterPlugin but never sends Configure would leave us waiting forever."""
        try:
            await asyncio.wait_for(self._dispatch.configured.wait(), self.registration_timeout)
        except TimeoutError:
            peer.close(f"runtime sent no Configure within {self.registration_timeout:.1f}s of registration",
                       level=logging.ERROR)

    async def _hook(self, name: str) -> None:
        handlers, hook = self._dispatch.handlers, bound_handler(self._plugin, name)
        if hook is None or handlers is None:
            return
        try:
            await call_with_budget(handlers, hook, (), self.registration_timeout, lambda _outcome: None)
        except Exception as exc:
            self._log.error("plugin hook failed", hook=name, error=repr(exc))

    # ----------------------------------------------------------------------------- runtime calls

    async def update_containers(
        self, updates: Iterable[api.ContainerUpdate], evictions: Iterable[api.ContainerEviction] = ()
    ) -> list[api.ContainerUpdate]:
        """Unsolicited update; returns the updates the runtime reports as failed.

        Not forbidden here, but on runtimes with NRI < v0.12.1 it can deadlock the runtime when it
        races an event: check :attr:`supports_safe_unsolicited_updates` first. Callable from the
        wire loop or from a handler (marshalled to the wire loop).
        """
        loop = self._loop
        if loop is not None and asyncio.get_running_loop() is not loop:
            future = asyncio.run_coroutine_threadsafe(self.update_containers(updates, evictions), loop)
            return await asyncio.wrap_future(future)
        peer = self._peer
        if peer is None or peer.closed:
            raise NotConnectedError("no runtime connection")
        request = api.UpdateContainersRequest(update=updates, evict=evictions)
        body = await peer.call(RUNTIME_SERVICE, "UpdateContainers", request.SerializeToString(),
                               self.request_timeout)
        return list(api.UpdateContainersResponse.FromString(body).failed)


async def serve(stub: Stub, logger: Any = None, *, handle_signals: bool = True) -> int:
    """Run ``stub`` until SIGINT/SIGTERM; the exit status for a plugin's ``main``.

    0 after a signal; 1 when a pre-installed plugin loses its runtime (containerd never relaunches
    it, so the process must end and say why). ``handle_signals=False``: the caller already stops the
    stub on those signals (a service that must handle them before its sockets are up).
    """
    log = KvLogger(logger, "nri_pinner.nri.stub")
    if handle_signals:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
                loop.add_signal_handler(signum, lambda: asyncio.ensure_future(stub.stop()))
    try:
        await stub.run()
    except PluginConnectionLost as exc:
        log.error("runtime connection lost; exiting (containerd relaunches pre-installed plugins only on restart)",
                  plugin=stub.full_name, error=str(exc))
        return 1
    return 0
