"""`nri-pinner run`: wire settings, topology, engine, stub, reconcile, inspection and metrics together."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

import structlog

from .. import __version__
from ..config import CONFIG_PATH, ConfigError, Settings, load, load_file
from ..config.validate import reserved_warnings
from ..engine.admission_engine import Engine
from ..engine.devicemanager.podresources import PodResourcesHintProvider
from ..engine.errors import PolicyOptionError
from ..engine.nicmanager.hints import NicHintProvider
from ..engine.topology.model import Topology
from ..engine.topology.sysfs import SysfsError, discover
from ..engine.topologymanager.hints import HintProvider
from ..nri.stub import Stub, serve
from ..nri.stub.handler_calls import HandlerThread
from . import instance_lock
from .checkpoint.file import read as read_checkpoint
from .clients.cri import CRIClient
from .clients.podresources import PodResources, PodResourcesMetrics, podresources_of
from .nic_lookup.lookup import NicLookup
from .observe import logs, readiness
from .observe.metrics import Metrics
from .observe.metrics_http import Listener
from .observe.metrics_http import readiness as ready_now
from .observe.status_server import start_server, status_document
from .plugin import PinnerPlugin
from .request_intake import memory_policy
from .watch.reconcile import Reconciler, stop_task

log = structlog.get_logger("nri_pinner")
EMBEDDED = "<embedded defaults>"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # blocked from the start of `run` until the loop handles them


class StartError(Exception):
    """Something `run` needs is taken or unusable (the metrics address): one line, exit status 2."""


def load_settings(path: str) -> Settings:
    """The config file; only the default path may be absent (then the embedded defaults apply)."""
    if path == CONFIG_PATH and not Path(path).exists():
        return load(files("nri_pinner.config").joinpath("default.toml").read_text(), EMBEDDED)
    return load_file(path)


def build_engine(settings: Settings, topology: Topology) -> tuple[Engine, NicLookup | None]:
    """The engine with the hint providers ``hints.providers`` names, and the NIC lookup it reads."""
    nics = NicLookup(settings.sysfs_root) if "nics" in settings.hints.providers else None
    providers: list[HintProvider] = []
    if nics is not None:
        providers.append(NicHintProvider(topology.numa_nodes, nics.numa_nodes))
    if "podresources" in settings.hints.providers:  # fetched in the background, see edge/clients/podresources.py
        pr = settings.podresources
        providers.append(PodResourcesHintProvider(topology.numa_nodes, PodResources(
            pr.socket, pr.refresh_seconds, pr.timeout_seconds)))
    return Engine.from_settings(settings, topology, providers, memory=memory_policy(settings, topology)), nics


class Service:
    def __init__(self, settings: Settings, engine: Engine, env: dict[str, str] | None = None,
                 nics: NicLookup | None = None) -> None:
        self.settings, self.nics = settings, nics
        env = dict(os.environ) if env is None else env
        loaded = read_checkpoint(settings.state.checkpoint)
        if loaded.problem:
            log.warning("checkpoint not used; state is rebuilt from the runtime", path=settings.state.checkpoint,
                        problem=loaded.problem)
        self.metrics = Metrics()
        if nics is not None:
            nics.on_late = self.metrics.nic_lookups_late.inc
        # the node thread: the core's one caller (NRI handlers, and every other thread's work queued to it)
        self.node_thread = HandlerThread("nri-pinner-node")
        self.podresources = podresources_of(engine)
        self.plugin = PinnerPlugin(settings, engine, self.metrics, loaded.body, nics, self.node_thread,
                                   self.podresources)
        if self.podresources is not None:
            self.podresources.metrics = PodResourcesMetrics(
                self.metrics.registry, (self.metrics.provider_admissions, self.metrics.provider_rejections))
        preinstalled = bool(env.get("NRI_PLUGIN_SOCKET"))
        self.stub = Stub(
            self.plugin, name=None if preinstalled else settings.nri.plugin_name,
            idx=None if preinstalled else settings.nri.plugin_index,
            socket_path=None if preinstalled else settings.nri.socket, env=env,
            logger=structlog.get_logger("nri_pinner.nri"), budget_margin=settings.nri.budget_margin_ms / 1000,
            backoff_max=settings.nri.reconnect_max_seconds, handler_thread=self.node_thread,
        )
        cri = CRIClient(settings.reconcile.cri_socket) if settings.reconcile.cri_socket else None
        self.reconciler = Reconciler(settings, self.plugin, self.stub, self.metrics, cri)
        writer = self.plugin.writer
        # the pools, connection and writes are read at scrape time (the pool gauges from the core's view)
        self.metrics.watch(self.stub, self.plugin.view, writer.counts if writer is not None else None)
        self.listener: Listener | None = None

    def document(self) -> dict[str, Any]:
        writer = self.plugin.writer
        return status_document(self.plugin.view(), self.stub, self.reconciler.repairs,
                               self.nics.snapshot() if self.nics is not None else None,
                               self.podresources.summary() if self.podresources is not None else None,
                               writer.stats() if writer is not None else None)

    def _listen_for_metrics(self) -> None:
        m = self.settings.metrics
        try:
            self.listener = Listener(self.metrics, m.address, m.port, asyncio.get_running_loop())
        except OSError as exc:  # in use, or an address this host does not have
            where = f"[{m.address}]:{m.port}" if ":" in m.address else f"{m.address}:{m.port}"
            raise StartError(f"cannot listen for metrics on {where} (metrics.address, metrics.port): "
                             f"{exc.strerror or exc}") from None

    def ready_state(self) -> tuple[bool, str]:
        """/readyz's verdict, with the line systemd shows (the notify protocol's STATUS)."""
        ready, why = ready_now(self.metrics)
        stub = self.stub
        return ready, readiness.status_text(ready, why, stub.socket_path, stub.runtime_name, stub.runtime_version)

    async def run(self, claim: instance_lock.SocketClaim | None = None,
                  notifier: readiness.Notifier | None = None) -> int:
        """Serve until a signal; ``claim``: the inspection socket, taken here when not given
        (InstanceConflict, StartError: nothing was started, nothing is left behind); ``notifier``:
        systemd's notify socket (READY=1 once registered and synchronized, STOPPING=1 at the end)."""
        claim = claim or instance_lock.claim(self.settings.inspect.socket)
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:  # before the socket is bound: up means a signal stops it cleanly
            with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
                loop.add_signal_handler(signum, lambda: asyncio.ensure_future(self.stub.stop()))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by run_from_config
        try:
            if self.settings.metrics.enabled:
                self._listen_for_metrics()
            server = await start_server(self.settings.inspect.socket, self.document, on_bound=claim.bound)
        except BaseException:
            claim.release()
            await asyncio.to_thread(self._close)
            raise
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(signal.SIGHUP, logs.reopen)  # logrotate's convention: reopen log.file
        if self.podresources is not None:
            self.podresources.start()
        reconcile = asyncio.create_task(self.reconciler.run())
        # a pre-installed plugin is containerd's child, not a unit's main process: it never notifies
        notify = (asyncio.create_task(readiness.announce(notifier, self.ready_state))
                  if notifier is not None and not self.stub.preinstalled else None)
        try:
            return await serve(self.stub, structlog.get_logger("nri_pinner.nri"), handle_signals=False)
        finally:
            if notify is not None and notifier is not None:
                await stop_task(notify)
                notifier.send("STOPPING=1", "STATUS=stopping: the last state is written")
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGHUP)
            await stop_task(reconcile)
            if self.listener is not None:
                self.listener.stop()
            await asyncio.to_thread(self.node_thread.stop)  # its queued work first: the last state is decided
            await asyncio.to_thread(self.plugin.close)  # the last state reaches the disk
            if self.podresources is not None:
                await asyncio.to_thread(self.podresources.close)
            await server.stop(0.5)
            claim.release()  # the socket file only if it is still the one bound here

    def _close(self) -> None:
        """A start that failed: the threads and writers the constructor started end."""
        if self.listener is not None:
            self.listener.stop()
        self.node_thread.stop()
        self.plugin.close()


def _cannot_start(exc: Exception) -> int:
    log.error("cannot start", error=str(exc))
    print(f"nri-pinner run: {exc}", file=sys.stderr)
    return 2


def run_from_config(path: str) -> int:
    """``nri-pinner run``. SIGINT/SIGTERM stay blocked until the service's loop handles them: a stop
    asked during start-up ends the service cleanly (exit 0, lock emptied, socket removed, state
    written) instead of killing it half-started."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        return _run(path)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _run(path: str) -> int:
    # $NOTIFY_SOCKET speaks for the unit: out of the environment before any child process can start
    notify = {k: os.environ.pop(k) for k in [readiness.NOTIFY_ENV] if k in os.environ}
    try:
        settings = load_settings(path)
    except ConfigError as exc:
        print(f"nri-pinner run: {exc}", file=sys.stderr)
        return 2
    try:
        logs.configure(settings.log.level, settings.log.format, settings.log.file)
    except OSError as exc:
        print(f"nri-pinner run: cannot open log.file {settings.log.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    try:
        # before anything else is started: the inspection socket, and the runtime it registers with
        claim = instance_lock.claim(settings.inspect.socket, settings.nri.socket)
    except (instance_lock.InstanceConflict, OSError) as exc:
        return _cannot_start(exc)
    try:
        topology = discover(settings.sysfs_root)
        engine, nics = build_engine(settings, topology)
    except (SysfsError, PolicyOptionError, ValueError) as exc:  # ValueError: memory capacities/reserve
        claim.release()
        return _cannot_start(exc)
    embedded = path == CONFIG_PATH and not Path(path).exists()
    log.info("starting", version=__version__, config=EMBEDDED if embedded else path, cpus=str(topology.online),
             numa_nodes=len(topology.numa_nodes), reserved=str(engine.policy.reserved),
             topology_policy=settings.topology_manager.policy)
    if embedded:
        log.info("no config file: running on the embedded defaults (nri-pinner config --defaults)", missing=path)
    for note in engine.notes:
        log.warning("configuration note", note=note)
    for warning in reserved_warnings(engine.policy.reserved, topology.online):
        log.warning("configuration warning", warning=warning)
    # the wire loop must not wait 5 ms (the default) for the GIL while a writer thread runs
    sys.setswitchinterval(0.0005)
    notifier = readiness.from_env(notify)
    try:
        return asyncio.run(Service(settings, engine, nics=nics).run(claim, notifier))
    except StartError as exc:
        return _cannot_start(exc)
    finally:
        if notifier is not None:
            notifier.close()
