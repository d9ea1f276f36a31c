"""One owner of engine and tracker state: the asyncio loop that carries the wire never takes the
tracker lock (a handler may hold it), and inspection reads a published view without it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from svc_harness import DUAL_SOCKET, container, copy_sysfs, create, document, make_settings, pod, running

from nri_pinner.nri.gen import api_pb2 as api

BPOD, GPOD = pod("burst", "burstable"), pod("gold")


class RecordingLock:
    """The tracker's RLock, noting each thread that acquires it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.threads: set[int] = set()

    def __enter__(self) -> bool:
        self.threads.add(threading.get_ident())
        return self._lock.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._lock.__exit__(*exc)


async def test_the_loop_never_takes_the_tracker_lock(workdir: Path) -> None:
    sysfs = copy_sysfs(DUAL_SOCKET, workdir / "sysfs")
    settings = make_settings(workdir, sysfs=sysfs)
    async with running(settings) as r:
        lock = RecordingLock()
        r.svc.tracker.lock = lock  # type: ignore[assignment]
        loop_thread = threading.get_ident()
        b = container(BPOD, "app", 100)
        await r.conn.create_container(create(BPOD, b))
        await r.conn.create_container(create(GPOD, container(GPOD, "app", 2000, 2000)))
        await r.conn.update_container(api.UpdateContainerRequest(pod=BPOD, container=b))
        (sysfs / "sys/devices/system/cpu/online").write_text("0-10\n")  # a CPU goes offline
        await r.svc.reconciler.tick()
        document(r.svc)
        assert lock.threads and loop_thread not in lock.threads
        assert document(r.svc)["pools"]["online"] == "0-10"  # the topology change was published


async def test_status_answers_while_a_handler_holds_the_lock(workdir: Path) -> None:
    async with running(make_settings(workdir)) as r:
        await r.conn.create_container(create(GPOD, container(GPOD, "app", 2000, 2000)))
        held, release = threading.Event(), threading.Event()

        def slow_handler() -> None:
            with r.svc.tracker.lock:
                held.set()
                release.wait(10)

        worker = threading.Thread(target=slow_handler)
        worker.start()
        try:
            assert held.wait(5)
            doc = await asyncio.wait_for(asyncio.to_thread(document, r.svc), 5)
            assert doc["pools"]["exclusive"] and doc["health"]["state_generation"] >= 2
        finally:
            release.set()
            worker.join()
