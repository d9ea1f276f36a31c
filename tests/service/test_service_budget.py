"""A decision that overruns the runtime's request budget: the runtime gets the shared pool in
time, the plugin stays connected, and the late decision is undone."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from svc_harness import (
    assignments,
    checkpoint_entries,
    container,
    cpuset_updates,
    create,
    document,
    make_settings,
    pod,
    running,
)

from nri_pinner.engine.admission_engine import AdmissionRequest, Decision, Engine
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.stub.wire import TtrpcStatusError
from testkit.fake_runtime import CONTAINERD_2_1_9

REQUEST_TIMEOUT = 1.0  # sent by the v0.8 runtime in Configure
MARGIN_MS = 400  # the plugin answers 0.6 s into a request


def slow_guaranteed_admissions(monkeypatch: pytest.MonkeyPatch, engine: Engine) -> threading.Event:
    """Guaranteed admissions block past the budget; returns an event set when a slow one returns."""
    admit = engine.admit
    returned = threading.Event()

    def slow(state: EngineState, request: AdmissionRequest) -> tuple[EngineState, Decision]:
        if request.qos != "guaranteed":
            return admit(state, request)
        time.sleep(REQUEST_TIMEOUT)  # a blocked decision: longer than the budget, inside the timeout
        try:
            return admit(state, request)
        finally:
            returned.set()

    monkeypatch.setattr(engine, "admit", slow)
    return returned


async def wait_for(condition: object, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.01)


async def test_over_budget_create_gets_the_shared_pool_and_the_late_decision_is_undone(
        monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    settings = make_settings(workdir, nri={"budget_margin_ms": MARGIN_MS})
    async with running(settings, CONTAINERD_2_1_9, request_timeout=REQUEST_TIMEOUT) as r:
        assert r.svc.stub.request_budget == pytest.approx(REQUEST_TIMEOUT - MARGIN_MS / 1000)
        bpod, gpod = pod("burst", "burstable"), pod("gold")
        b = container(bpod, "app", 100)
        await r.conn.create_container(create(bpod, b))
        slow_guaranteed_admissions(monkeypatch, r.svc.plugin.node.engine)

        g = container(gpod, "app", 2000, 2000)
        reply = await r.conn.create_container(create(gpod, g))  # the runtime's 1 s timeout would drop us
        assert reply is not None and not r.conn.closed
        assert CPUSet.parse(reply.adjust.linux.resources.cpu.cpus) == r.topology.online  # fallback: shared pool
        assert reply.update == []

        await wait_for(lambda: r.svc.stub.stats.late_replies == 1)
        await wait_for(lambda: document(r.svc)["pools"]["exclusive"] == "")  # the undo is published
        doc = document(r.svc)
        assert doc["pools"]["exclusive"] == ""
        assert doc["pools"]["shared"] == str(r.topology.online)
        row = assignments(r.svc)[g.id]
        assert not row["exclusive"] and row["cpus"] == str(r.topology.online)
        # the checkpoint is written behind the published view (its writer thread): wait for it on disk
        await wait_for(lambda: checkpoint_entries(settings).get(g.id, {"exclusive": True})["exclusive"] is False)
        metrics = r.svc.metrics.registry
        assert metrics.get_sample_value("nri_pinner_late_handler_replies_total", {"method": "CreateContainer"}) == 1
        assert metrics.get_sample_value("nri_pinner_fail_open_total", {"cause": "timeout"}) == 1

        # the next reply resends what the discarded reply had told the runtime (it never arrived)
        late = container(bpod, "next", 100)
        reply = await r.conn.create_container(create(bpod, late))
        assert reply is not None
        online = str(r.topology.online)
        assert {cid: cpus for cid, (cpus, _) in cpuset_updates(reply.update).items()} == {b.id: online, g.id: online}


async def test_over_budget_create_with_on_timeout_fail_fails_in_time(
        monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    settings = make_settings(workdir, nri={"budget_margin_ms": MARGIN_MS, "on_timeout": "fail"})
    async with running(settings, CONTAINERD_2_1_9, request_timeout=REQUEST_TIMEOUT) as r:
        returned = slow_guaranteed_admissions(monkeypatch, r.svc.plugin.node.engine)
        gpod = pod("gold")
        with pytest.raises(TtrpcStatusError, match="request budget"):
            await r.conn.create_container(create(gpod, container(gpod, "app", 2000, 2000)))
        assert not r.conn.closed
        await asyncio.to_thread(returned.wait, 5)
        await wait_for(lambda: r.svc.stub.stats.late_replies == 1)
        # inspection shows the last published view: the undo is published when discarded_reply ends
        await wait_for(lambda: document(r.svc)["pools"]["exclusive"] == "")
        assert assignments(r.svc) == {}  # the create failed: nothing to track
        assert checkpoint_entries(settings) == {}
