"""`nri-pinner run`: wire settings, topology, engine, stub, reconcile, inspection and metrics together."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

import structlog

from .. import __version__
from ..config import CONFIG_PATH, ConfigError, Settings, load, load_file
from ..engine.admission import Engine
from ..engine.devicemanager.podresources import PodResourcesHintProvider
from ..engine.errors import PolicyOptionError
from ..engine.nicmanager.hints import NicHintProvider
from ..engine.topology.model import Topology
from ..engine.topology.sysfs import SysfsError, discover
from ..engine.topologymanager.hints import HintProvider
from ..nri.stub import Stub, serve
from ..nri.stub_handlers import HandlerThread
from . import logs
from .checkpoint_file import read as read_checkpoint
from .cri_client import CRIClient
from .metrics import Metrics
from .metrics_http import Listener
from .nic_lookup import NicLookup
from .plugin import PinnerPlugin
from .podresources_client import PodResources, PodResourcesMetrics, podresources_of
from .reconcile import Reconciler, stop_task
from .request_intake import memory_policy
from .status_server import start_server, status_document

log = structlog.get_logger("nri_pinner")


def load_settings(path: str) -> Settings:
    """The config file; only the default path may be absent (then the embedded defaults apply)."""
    if path == CONFIG_PATH and not Path(path).exists():
        return load(files("nri_pinner.config").joinpath("default.toml").read_text(), "<embedded defaults>")
    return load_file(path)


def build_engine(settings: Settings, topology: Topology) -> tuple[Engine, NicLookup | None]:
    """The engine with the hint providers ``hints.providers`` names, and the NIC lookup it reads."""
    nics = NicLookup(settings.sysfs_root) if "nics" in settings.hints.providers else None
    providers: list[HintProvider] = []
    if nics is not None:
        providers.append(NicHintProvider(topology.numa_nodes, nics.numa_nodes))
    if "podresources" in settings.hints.providers:  # fetched in the background, see service/podresources_client.py
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
        self.metrics.watch(self.stub, self.plugin.view, writer.counts if writer is not None else None)
        self.listener: Listener | None = None

    def document(self) -> dict[str, Any]:
        writer = self.plugin.writer
        return status_document(self.plugin.view(), self.stub, self.reconciler.repairs,
                               self.nics.snapshot() if self.nics is not None else None,
                               self.podresources.summary() if self.podresources is not None else None,
                               writer.stats() if writer is not None else None)

    async def run(self) -> int:
        server = await start_server(self.settings.inspect.socket, self.document)
        if self.settings.metrics.enabled:
            m = self.settings.metrics
            self.listener = Listener(self.metrics, m.address, m.port, asyncio.get_running_loop())
        if self.podresources is not None:
            self.podresources.start()
        reconcile = asyncio.create_task(self.reconciler.run())
        try:
            return await serve(self.stub, structlog.get_logger("nri_pinner.nri"))
        finally:
            await stop_task(reconcile)
            if self.listener is not None:
                self.listener.stop()
            await asyncio.to_thread(self.node_thread.stop)  # its queued work first: the last state is decided
            await asyncio.to_thread(self.plugin.close)  # the last state reaches the disk
            if self.podresources is not None:
                await asyncio.to_thread(self.podresources.close)
            await server.stop(0.5)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.settings.inspect.socket)


def run_from_config(path: str) -> int:
    try:
        settings = load_settings(path)
    except ConfigError as exc:
        print(f"nri-pinner run: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log.level, settings.log.format, settings.log.file)
    try:
        topology = discover(settings.sysfs_root)
        engine, nics = build_engine(settings, topology)
    except (SysfsError, PolicyOptionError, ValueError) as exc:  # ValueError: memory capacities/reserve
        log.error("cannot start", error=str(exc))
        print(f"nri-pinner run: {exc}", file=sys.stderr)
        return 2
    log.info("starting", version=__version__, config=path, cpus=str(topology.online),
             numa_nodes=len(topology.numa_nodes), reserved=str(engine.policy.reserved),
             topology_policy=settings.topology_manager.policy)
    for note in engine.notes:
        log.warning("configuration note", note=note)
    # the wire loop must not wait 5 ms (the default) for the GIL while a writer thread runs
    sys.setswitchinterval(0.0005)
    return asyncio.run(Service(settings, engine, nics=nics).run())
