"""Drift repair on a timer, through a path that cannot deadlock the runtime.

An unsolicited NRI UpdateContainers deadlocks containerd under pod churn on every NRI release
before v0.12.1 (lock-order inversion, fixed by containerd/nri 55afaa2). So:
- NRI >= v0.12.1: UpdateContainers, from this timer (never from inside an event handler);
- older NRI with a CRI socket: CRI UpdateContainerResources with only the cpuset fields — the
  kubelet's own path, which takes the runtime's locks in lifecycle order. It comes back to us as
  an NRI UpdateContainer that the plugin recognises while this call is still in flight, so the
  call is async and never blocks the stub's loop;
- neither: the repair rides on the next event reply, and the drift is logged meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import structlog

from ..config import Settings
from ..engine.admission import AdmissionRequest, Engine
from ..engine.cpuset import CPUSet, CPUSetError
from ..engine.qos import QoS
from ..engine.topology.sysfs import discover
from ..nri.stub import Stub
from .cgroup_passes import CgroupSyncer
from .cgroup_paths import CgroupError, read_cpus
from .cpuset_writer import CpusetWriter
from .cri_client import CRIClient
from .metrics import Metrics
from .reply_updates import cpu_update
from .tracker import Tracker
from .uevents import open_socket, watch_cpus

log = structlog.get_logger("nri_pinner.reconcile")


@dataclass(frozen=True)
class Drift:
    container_id: str
    name: str
    actual: CPUSet
    desired: CPUSet
    mems: str


class Reconciler:
    def __init__(self, settings: Settings, tracker: Tracker, stub: Stub | None, metrics: Metrics,
                 cri: CRIClient | None, writer: CpusetWriter | None = None,
                 syncer: CgroupSyncer | None = None) -> None:
        self.settings, self.tracker, self.stub, self.metrics, self.cri = settings, tracker, stub, metrics, cri
        self._online_path = Path(settings.sysfs_root) / "sys/devices/system/cpu/online"
        self._online = tracker.engine.topology.online
        self._online_lock = asyncio.Lock()  # the timer and the uevent watcher never rebuild at once
        self.repairs = 0
        self.writer, self.syncer = writer, syncer

    async def run(self) -> None:
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

    async def tick(self) -> list[Drift]:
        if self.stub is not None and not self.stub.synchronized:
            return []
        await self._check_online_cpus()
        drifts = await asyncio.to_thread(self.find_drift)
        for d in drifts:
            path = await self._repair_one(d)
            self.repairs += 1
            self.metrics.reconcile_repairs.labels(path).inc()
            log.warning("cpuset drift repaired", container=d.name, container_id=d.container_id[:12],
                        actual=str(d.actual), desired=str(d.desired), path=path)
        return drifts

    def find_drift(self) -> list[Drift]:
        tr = self.tracker
        with tr.lock:
            wanted = [(t.container_id, t.key[1], t.cgroups_path, *tr.desired(t))
                      for t in tr.containers.values() if not t.stopped and t.cgroups_path]
        drifts = []
        for cid, name, cgroups_path, desired, mems in wanted:
            try:
                actual = read_cpus(self.settings.reconcile.cgroup_root, cgroups_path)
            except CgroupError as exc:
                log.debug("cannot read cpuset", container=name, error=str(exc))
                continue
            if actual != desired:
                drifts.append(Drift(cid, name, actual, desired, mems))
        return drifts

    async def _repair_one(self, d: Drift) -> str:
        """One repair's NRI or CRI error never aborts the pass: that one rides on the next reply."""
        try:
            return await self._repair(d)
        except Exception as exc:
            log.warning("repair failed; repairing in the next event reply", container=d.name, error=repr(exc))
            return await self._next_reply(d)

    def _current(self, d: Drift) -> Drift | None:
        """The drift as it stands now (call with the lock): events since `find_drift` may have
        changed the desired set (a Guaranteed create shrinks the pool) or removed the container."""
        t = self.tracker.containers.get(d.container_id)
        if t is None or t.stopped:
            return None
        desired, mems = self.tracker.desired(t)
        return replace(d, desired=desired, mems=mems)

    def _write(self, d: Drift) -> tuple[Drift | None, bool]:
        """Repair in the cgroup under the lock, so no event can change the desired set meanwhile.
        systemd is told first, off the lock (a D-Bus round trip must not hold up the handlers); a
        desired set that changed meanwhile goes to the runtime instead."""
        writer = self.writer
        with self.tracker.lock:
            now = self._current(d)
            if now is None or writer is None:
                return now, False
            path = self.tracker.containers[d.container_id].cgroups_path
        untold = writer.tell_systemd([(path, now.desired, now.mems)])
        with self.tracker.lock:
            again = self._current(d)
            if again is None or (again.desired, again.mems) != (now.desired, now.mems):
                return again, False
            t = self.tracker.containers[d.container_id]
            try:
                writer.apply(t.cgroups_path, now.desired, now.mems)
            except CgroupError as exc:
                log.info("cgroup repair failed; using the runtime", container=d.name, error=str(exc))
                return now, False
            if untold:  # repaired, but systemd would undo it again: the runtime's update tells it
                log.info("systemd scope not updated; using the runtime", container=d.name, error=untold[path])
                return now, False
            t.applied_cpus, t.applied_mems = now.desired, now.mems
            return now, True

    async def _repair(self, d: Drift) -> str:
        now, written = await asyncio.to_thread(self._write, d)
        if now is None:
            return "gone"
        if written:
            return "cgroup"
        generation = self.tracker.generation
        path = await self._send(now)
        if self.tracker.generation != generation:  # an event changed state while the repair was in flight
            await asyncio.to_thread(self._forget, d.container_id)
        return path

    async def _send(self, d: Drift) -> str:
        if self.stub is not None and self.stub.supports_safe_unsolicited_updates:
            failed = await self.stub.update_containers([cpu_update(d.container_id, d.desired, d.mems)])
            if not failed:
                return "nri"
        if self.cri is not None:
            try:
                await self.cri.update_cpuset(d.container_id, str(d.desired), d.mems)
                return "cri"
            except grpc.aio.AioRpcError as exc:
                log.warning("CRI repair failed; repairing in the next event reply", container=d.name,
                            code=str(exc.code()), details=exc.details())
        return await self._next_reply(d)

    async def _next_reply(self, d: Drift) -> str:
        await asyncio.to_thread(self._forget, d.container_id, True)
        return "next-reply"

    def _forget(self, container_id: str, reply: bool = False) -> None:
        """The runtime may hold a stale cpuset for this container: the next pass or reply resends it.
        `reply`: only a reply can (no CRI, old NRI, or systemd refused the scope); with cgroup writes
        on, a started container is in a reply only when marked as a fallback."""
        with self.tracker.lock:
            t = self.tracker.containers.get(container_id)
            if t is not None:
                t.applied_cpus = None
                t.fallback = t.fallback or reply

    async def _check_online_cpus(self) -> None:
        async with self._online_lock:
            await self._check_online_cpus_locked()

    async def _check_online_cpus_locked(self) -> None:
        """CPU hotplug without a drain: rebuild the engine for the new online set and repair."""
        try:
            text = await asyncio.to_thread(self._online_path.read_text)
            online = CPUSet.parse(text)
        except (OSError, CPUSetError):
            return
        if online == self._online:
            return
        topology = await asyncio.to_thread(discover, self.settings.sysfs_root)
        settings, reserved = self.settings, self.settings.cpu_manager.reserved_cpus
        if reserved is not None and not reserved.issubset(topology.online):
            # the policy refuses offline reserved CPUs; reserve the online rest until they return
            log.warning("reserved CPUs are offline", offline=str(reserved - topology.online))
            settings = replace(settings, cpu_manager=replace(settings.cpu_manager,
                                                             reserved_cpus=reserved & topology.online))
        current = self.tracker.engine  # the same hint providers and memory policy, on the new topology
        engine = Engine.from_settings(settings, topology, current.extra_providers, memory=current.memory)
        await asyncio.to_thread(self.apply_topology_change, engine)
        self._online = online

    def apply_topology_change(self, engine: Engine) -> None:
        tr = self.tracker
        with tr.lock:
            before = tr.engine.topology.online
            state, messages = engine.policy.start(tr.state)
            # CPUs that came back: containers whose admitted CPUs are free again get them back
            for a in list(state.assignments.values()):
                missing = a.admitted - a.current
                if a.exclusive and missing and missing.issubset(engine.policy.available_for_exclusive(state)):
                    state = state.hold(replace(a, current=a.admitted))
                    messages.append(f"{a.pod}/{a.container}: CPUs {missing} are back online; restored")
            # Guaranteed containers that lost every CPU went to the shared pool: pin them again if they fit now
            for t in tr.containers.values():
                held = state.get(*t.key)
                if t.stopped or t.intent.qos is not QoS.GUARANTEED or (held is not None and held.exclusive):
                    continue
                request = AdmissionRequest(t.key[0], t.key[1], t.intent.qos, t.intent.request_milli,
                                           t.intent.limit_milli, init=t.intent.init, restartable=t.intent.restartable)
                readmitted, decision = engine.admit(engine.remove(state, *t.key), request)
                if decision.admitted and decision.exclusive:
                    state = readmitted
                    messages.append(f"{t.intent.pod_name}/{t.key[1]}: pinned again on CPUs {decision.cpus}")
            tr.engine, tr.state = engine, state
            for t in tr.containers.values():
                if t.started:  # the kernel drops offlined CPUs from every v1 cpuset: read them back
                    t.applied_cpus = None
            view = tr.publish()
            if self.syncer is not None:  # the same path as an event's pool change, now
                self.syncer.kick(view.generation)
            log.warning("online CPUs changed", before=str(before), after=str(engine.topology.online),
                        shared=str(tr.shared_pool))
            for m in messages:
                log.warning("state repaired", repair=m)


async def stop_task(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
