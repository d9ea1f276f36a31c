"""Checkpoint write-behind (edge/checkpoint/writer.py): replies never wait for the disk, bursts
coalesce to one write of the newest state, unchanged bodies are not rewritten."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from svc_harness import checkpoint_entries, container, create, make_settings, pod, running

from nri_pinner.core.checkpoint import Snapshot
from nri_pinner.edge.checkpoint import file as checkpoint_file
from nri_pinner.edge.checkpoint import writer as checkpoint_writer
from nri_pinner.edge.checkpoint.writer import CheckpointWriter
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.cpuset import CPUSet

GPOD, BPOD = pod("gold"), pod("burst", "burstable")


@pytest.fixture
def gated_disk(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[dict[str, Any]]]:
    """checkpoint_file.write blocks until the test opens the gate; bodies written are recorded."""
    gate, bodies = threading.Event(), []
    real = checkpoint_file.write

    def write(path: str | Path, body: dict[str, Any]) -> None:
        assert gate.wait(10), "gate never opened"
        bodies.append(body)
        real(path, body)

    monkeypatch.setattr(checkpoint_file, "write", write)
    return gate, bodies


async def test_replies_do_not_wait_for_the_disk_and_bursts_coalesce(
        workdir: Path, gated_disk: tuple[threading.Event, list[dict[str, Any]]]) -> None:
    gate, bodies = gated_disk
    settings = make_settings(workdir)
    async with running(settings) as r:
        # every reply arrives while the disk is stuck (a reply waiting on it would time out here)
        for i in range(4):
            reply = await r.conn.create_container(create(BPOD, container(BPOD, f"b{i}", 100)))
            assert reply is not None
        reply = await r.conn.create_container(create(GPOD, container(GPOD, "app", 2000, 2000)))
        assert reply is not None and reply.adjust.linux.resources.cpu.cpus
        gate.set()
        entries = await asyncio.to_thread(checkpoint_entries, settings)
        assert set(entries) == {"burst-b0", "burst-b1", "burst-b2", "burst-b3", "gold-app"}
        assert entries["gold-app"]["exclusive"]
        # the synchronize write (blocked first) and then one write for the five events behind it
        assert len(bodies) <= 2 and r.svc.plugin.checkpoints.written == len(bodies)


def test_unchanged_bodies_are_not_rewritten(tmp_path: Path) -> None:
    w = CheckpointWriter(tmp_path / "cp.json")
    snap = Snapshot(EngineState(CPUSet.parse("1-3")), {}, CPUSet([0]), CPUSet.parse("1-3"))
    w.submit(snap)
    assert w.flush()
    mtime = (tmp_path / "cp.json").stat().st_mtime_ns
    w.submit(Snapshot(EngineState(CPUSet.parse("1-3")), {}, CPUSet([0]), CPUSet.parse("1-3")))
    assert w.flush()
    assert (w.written, w.skipped) == (1, 1) and (tmp_path / "cp.json").stat().st_mtime_ns == mtime
    w.submit(Snapshot(EngineState(CPUSet.parse("2-3")), {}, CPUSet([0]), CPUSet.parse("2-3")))
    w.close()
    assert w.written == 2 and checkpoint_file.read(tmp_path / "cp.json").body == {
        "policy": "static", "reserved": "0", "shared": "2-3", "entries": []}


def test_a_failed_write_is_counted_and_the_next_one_still_lands(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    w = CheckpointWriter(blocker / "cp.json")  # parent is a file: every write fails
    w.submit(Snapshot(EngineState(CPUSet([1])), {}, CPUSet([0]), CPUSet([1])))
    assert w.flush() and w.failed == 1
    w.path = tmp_path / "cp.json"
    w.submit(Snapshot(EngineState(CPUSet([1])), {}, CPUSet([0]), CPUSet([1])))
    w.close()
    assert w.written == 1 and checkpoint_file.read(tmp_path / "cp.json").body is not None


def test_flush_and_close_cut_the_linger_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The writer waits LINGER_SECONDS after a change to coalesce a burst; a flush must not wait it out.
    monkeypatch.setattr(checkpoint_writer, "LINGER_SECONDS", 60.0)
    w = CheckpointWriter(tmp_path / "cp.json")
    w.submit(Snapshot(EngineState(CPUSet.parse("1-3")), {}, CPUSet([0]), CPUSet.parse("1-3")))
    assert w.flush(timeout=10) and w.written == 1
    w.submit(Snapshot(EngineState(CPUSet.parse("2-3")), {}, CPUSet([0]), CPUSet.parse("2-3")))
    w.close(timeout=10)
    assert w.written == 2 and w._thread is not None and not w._thread.is_alive()
    assert checkpoint_file.read(tmp_path / "cp.json").body == {"policy": "static", "reserved": "0", "shared": "2-3",
                                                        "entries": []}
