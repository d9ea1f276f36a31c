"""Drift repair on a timer, through a path that cannot deadlock the runtime.

An unsolicited NRI UpdateContainers deadlocks containerd under pod churn on every NRI release
before v0.12.1 (lock-order inversion, fixed by containerd/nri 55afaa2). So:
- NRI >= v0.12.1: UpdateContainers, from this timer (never from inside an event handler);
- older NRI with a CRI socket: CRI UpdateContainerResources with only the cpuset fields — the
  kubelet's own path, which takes the runtime's locks in lifecycle order. It comes back to us as
  an NRI UpdateContainer that the plugin recognises while this call is still in flight, so the
  call is async and never blocks the stub's loop;
- neither: the repair rides on the next event reply, and the drift is logged meanwhile.
The same two paths bring the runtime's own record of a container in line with its cgroup when the
core asks (`UpdateRuntimeRecords`, core/runtime_record_updates.py), one container at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import grpc
import structlog

from ...config import Settings
from ...core import events as ev
from ...core.effects import UpdateRuntimeRecords
from ...core.repairs import Drift, DriftProbe
from ...core.state import Mems, mems_text
from ...engine.admission_engine import Engine
from ...engine.cpuset import CPUSet, CPUSetError
from ...engine.hotplug import settings_for_online
from ...engine.topology.sysfs import discover
from ...nri.gen import api_pb2 as api
from ...nri.stub import Stub
from ..cgroups.paths import CgroupError, read_cpus
from ..clients.cri import CRIClient
from ..observe.metrics import Metrics
from ..plugin import PinnerPlugin
from .uevents import open_socket, watch_cpus

log = structlog.get_logger("nri_pinner.reconcile")


def update_proto(container_id: str, cpus: CPUSet, mems: Mems) -> api.ContainerUpdate:
    """An unsolicited NRI update (UpdateContainers): the runtime's own message, not a reply's."""
    u = api.ContainerUpdate(container_id=container_id)
    u.linux.resources.cpu.cpus = str(cpus)
    u.linux.resources.cpu.mems = mems_text(mems)
    return u


class Reconciler:
    """The reconcile timer and the CPU-hotplug watcher, on the wire loop: they read cgroups and sysfs
    (in worker threads) and send repairs through the runtime; every decision is the core's, asked
    through the plugin's `ask` (queued on the node thread)."""

    def __init__(self, settings: Settings, plugin: PinnerPlugin, stub: Stub | None, metrics: Metrics,
                 cri: CRIClient | None) -> None:
        self.settings, self.plugin, self.stub, self.metrics, self.cri = settings, plugin, stub, metrics, cri
        self._online_path = Path(settings.sysfs_root) / "sys/devices/system/cpu/online"
        self._online = plugin.view().engine.topology.online
        # the timer and the uevent watcher queue their checks; one task runs them, never two at once
        self._online_checks: list[asyncio.Future[None]] = []
        self._online_checker: asyncio.Task[None] | None = None
        self.repairs = 0
        self._record_tasks: set[asyncio.Task[None]] = set()  # referenced until done (the loop keeps weak ones)

    async def run(self) -> None:
        if self.cri is not None or (self.stub is not None and self.stub.supports_safe_unsolicited_updates):
            loop = asyncio.get_running_loop()

            def send(effect: UpdateRuntimeRecords) -> None:  # on the node thread: the calls run on this loop
                loop.call_soon_threadsafe(lambda: self._record_tasks.add(loop.create_task(self._sync_records(effect))))

            self.plugin.record_sender = send
            self.plugin.post(ev.RuntimeRecordUpdatesReady())
        sock = open_socket()
        watcher = asyncio.create_task(watch_cpus(sock, self.cpus_changed)) if sock is not None else None
        try:
            period = self.settings.reconcile.period_seconds
            while True:
                await asyncio.sleep(period if period > 0 else 3600)
                if period <= 0:
                    continue
                try:
                    await self.tick()
                except Exception as exc:  # the timer must survive anything one pass meets
                    log.error("reconcile pass failed", error=repr(exc))
        finally:
            await stop_task(watcher)

    async def cpus_changed(self) -> None:
        """A kernel uevent said a CPU changed state: rebuild for the online set now, not at the next tick."""
        if self.stub is not None and not self.stub.synchronized:
            return  # Synchronize reads the topology the engine has; the first tick after it checks
        await self._check_online_cpus()

    async def _ask(self, event: ev.Event) -> Any:
        return await asyncio.wrap_future(self.plugin.ask(event))

    async def tick(self) -> list[Drift]:
        if self.stub is not None and not self.stub.synchronized:
            return []
        await self._check_online_cpus()
        probes: list[DriftProbe] = await self._ask(ev.DriftCheck())
        actual = await asyncio.to_thread(self._read, probes)
        decided: list[tuple[Drift, str]] = await self._ask(ev.CpusetsRead(actual))
        drifts = []
        for d, how in decided:
            path = await self._repair_one(d) if how == "runtime" else how
            if path == "gone":
                continue
            drifts.append(d)
            self.repairs += 1
            self.metrics.reconcile_repairs.labels(path).inc()
            # only started containers are checked (core/repairs.py): an empty cgroup-v2 set inherits
            log.warning("cpuset drift repaired", container=d.name, container_id=d.container_id[:12],
                        actual=str(d.actual) or "empty (its parent's CPUs)", desired=str(d.desired), path=path)
        return drifts

    def _read(self, probes: list[DriftProbe]) -> dict[str, CPUSet]:
        actual = {}
        for p in probes:
            try:
                actual[p.container_id] = read_cpus(self.settings.reconcile.cgroup_root, p.cgroups_path)
            except CgroupError as exc:
                log.debug("cannot read cpuset", container=p.name, error=str(exc))
        return actual

    async def _repair_one(self, d: Drift) -> str:
        """One repair's NRI or CRI error never aborts the pass: that one rides on the next reply."""
        try:
            path = await self._send(d)
        except Exception as exc:
            log.warning("repair failed; repairing in the next event reply", container=d.name, error=repr(exc))
            path = "next-reply"
        self.plugin.post(ev.RuntimeRepaired(d.container_id, d.generation, sent=path != "next-reply"))
        return path

    async def _send(self, d: Drift) -> str:
        if self.stub is not None and self.stub.supports_safe_unsolicited_updates:
            failed = await self.stub.update_containers([update_proto(d.container_id, d.desired, d.mems)])
            if not failed:
                return "nri"
        if self.cri is not None:
            try:
                await self.cri.update_cpuset(d.container_id, str(d.desired), mems_text(d.mems))
                return "cri"
            except grpc.aio.AioRpcError as exc:
                log.warning("CRI repair failed; repairing in the next event reply", container=d.name,
                            code=str(exc.code()), details=exc.details())
        return "next-reply"

    async def _sync_records(self, effect: UpdateRuntimeRecords) -> None:
        """Update the runtime's record of each container, one after the other; the core hears the outcome."""
        results = []
        for item in effect.items:
            path, error = "", ""
            try:
                if self.stub is not None and self.stub.supports_safe_unsolicited_updates:
                    failed = await self.stub.update_containers([update_proto(item.container_id, item.cpus, item.mems)])
                    path, error = ("", f"NRI update failed: {failed}") if failed else ("nri", "")
                if not path and self.cri is not None:
                    await self.cri.update_cpuset(item.container_id, str(item.cpus), mems_text(item.mems),
                                                 timeout=self.plugin.pass_wait)
                    path = "cri"
            except Exception as exc:  # one container's failure is the core's to note; the loop goes on
                error = repr(exc) if not isinstance(exc, grpc.aio.AioRpcError) else f"{exc.code()}: {exc.details()}"
            results.append(ev.RecordResult(item.container_id, path, error))
        self.metrics.record_updates.labels("ok").inc(sum(1 for r in results if r.path))
        self.metrics.record_updates.labels("failed").inc(sum(1 for r in results if not r.path))
        self.plugin.post(ev.RuntimeRecordsUpdated(effect.sync_id, results))
        task = asyncio.current_task()
        if task is not None:
            self._record_tasks.discard(task)

    async def _check_online_cpus(self) -> None:
        """Returns once a check begun after this call has finished (checks asked meanwhile share it)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._online_checks.append(done)
        if self._online_checker is None or self._online_checker.done():
            self._online_checker = asyncio.create_task(self._run_online_checks())
        await done

    async def _run_online_checks(self) -> None:
        while self._online_checks:
            waiting, self._online_checks = self._online_checks, []
            try:
                await self._check_online_cpus_once()
            except BaseException as exc:
                for w in waiting:
                    if not w.done():
                        w.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
                if not isinstance(exc, Exception):
                    raise
                continue
            for w in waiting:
                if not w.done():
                    w.set_result(None)

    async def _check_online_cpus_once(self) -> None:
        """CPU hotplug without a drain: rebuild the engine for the new online set and repair."""
        try:
            text = await asyncio.to_thread(self._online_path.read_text)
            online = CPUSet.parse(text)
        except (OSError, CPUSetError):
            return
        if online == self._online:
            return
        topology = await asyncio.to_thread(discover, self.settings.sysfs_root)
        settings, offline = settings_for_online(self.settings, topology.online)  # the online rest is reserved
        if offline:
            log.warning("reserved CPUs are offline", offline=str(offline))
        current = self.plugin.view().engine  # the same hint providers and memory policy, on the new topology
        engine = Engine.from_settings(settings, topology, current.extra_providers, memory=current.memory)
        await self._ask(ev.TopologyChanged(engine))
        self._online = online

async def stop_task(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
