"""One owner of node state: only the node thread calls the core (NRI handlers run there; the wire
loop, the reconcile timer and the pass threads queue their work to it), and inspection reads a
published view, so it answers while the node thread is busy."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from svc_harness import DUAL_SOCKET, container, copy_sysfs, create, document, make_settings, pod, running

from nri_pinner.core import events as ev
from nri_pinner.core.node import Outcome
from nri_pinner.nri.gen import api_pb2 as api

BPOD, GPOD = pod("burst", "burstable"), pod("gold")


async def test_only_the_node_thread_calls_the_core(workdir: Path) -> None:
    sysfs = copy_sysfs(DUAL_SOCKET, workdir / "sysfs")
    settings = make_settings(workdir, sysfs=sysfs)
    async with running(settings) as r:
        core = r.svc.plugin.core
        callers: dict[str, set[int]] = {}
        real = core.handle

        def recording(event: ev.Event) -> Outcome:
            callers.setdefault(type(event).__name__, set()).add(threading.get_ident())
            return real(event)

        core.handle = recording  # type: ignore[method-assign]
        b = container(BPOD, "app", 100)
        await r.conn.create_container(create(BPOD, b))
        await r.conn.state_change(api.START_CONTAINER, BPOD, b)
        g = container(GPOD, "app", 2000, 2000)
        await r.conn.create_container(create(GPOD, g))
        await r.conn.state_change(api.START_CONTAINER, GPOD, g)
        await r.conn.update_container(api.UpdateContainerRequest(pod=BPOD, container=b))
        (sysfs / "sys/devices/system/cpu/online").write_text("0-10\n")  # a CPU goes offline
        await r.svc.reconciler.tick()
        assert await asyncio.to_thread(r.svc.plugin.await_pass, 5)
        document(r.svc)
        node_thread = {r.svc.node_thread.ident}
        # NRI events, pass results, timers, the reconcile's questions and the hotplug: all on one thread
        assert {"CreateContainer", "StartContainer", "UpdateContainer", "DriftCheck", "CpusetsRead",
                "TopologyChanged", "CgroupsWritten", "TimerFired"} <= set(callers)
        assert set().union(*callers.values()) == node_thread
        assert document(r.svc)["pools"]["online"] == "0-10"  # the topology change was published


async def test_status_answers_while_the_node_thread_is_busy(workdir: Path) -> None:
    async with running(make_settings(workdir)) as r:
        await r.conn.create_container(create(GPOD, container(GPOD, "app", 2000, 2000)))
        busy, release = threading.Event(), threading.Event()

        def slow() -> None:
            busy.set()
            release.wait(10)

        r.svc.node_thread.submit(slow)
        try:
            assert busy.wait(5)
            doc = await asyncio.wait_for(asyncio.to_thread(document, r.svc), 5)
            assert doc["pools"]["exclusive"] and doc["health"]["state_generation"] >= 2
        finally:
            release.set()
