"""The reconcile timer and the CPU-hotplug watcher never rebuild the engine at once: their online-CPU
checks are queued and run one at a time by one task (no lock); a check asked while another runs gets
one begun after it was asked, and checks asked together share it."""

from __future__ import annotations

import asyncio

import pytest

from nri_pinner.edge.watch.reconcile import Reconciler


class Checks(Reconciler):
    """Only the scheduling of checks: each check is a recorded pause instead of sysfs and the core."""

    def __init__(self, fail_first: bool = False) -> None:  # the scheduling fields only
        self._online_checks = []
        self._online_checker = None
        self.running = self.most = self.runs = 0
        self.fail_first = fail_first

    async def _check_online_cpus_once(self) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        self.runs += 1
        try:
            await asyncio.sleep(0.01)
            if self.fail_first and self.runs == 1:
                raise OSError("sysfs went away")
        finally:
            self.running -= 1


def test_checks_asked_at_once_never_overlap_and_share_runs() -> None:
    async def go() -> Checks:
        r = Checks()
        first = asyncio.create_task(r._check_online_cpus())
        await asyncio.sleep(0.002)  # the first check is running: the next ones need a check begun later
        await asyncio.gather(*(r._check_online_cpus() for _ in range(5)), first)
        return r

    r = asyncio.run(go())
    assert r.most == 1
    assert r.runs == 2  # the running one, then one for the five asked during it


def test_a_failed_check_reaches_its_callers_and_the_next_check_still_runs() -> None:
    async def go() -> Checks:
        r = Checks(fail_first=True)
        with pytest.raises(OSError):
            await r._check_online_cpus()
        await r._check_online_cpus()
        return r

    assert asyncio.run(go()).runs == 2
