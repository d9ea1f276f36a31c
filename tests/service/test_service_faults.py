"""Faults around the checkpoint file and the reconcile pass (issue 20, defect 5).

Disk full and read-only use a real small tmpfs (root only, as in CI); the short-write case limits
os.write's size on a real file, since a real short write on a regular file cannot be forced here.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from svc_harness import container, cpuset_updates, create, make_settings, mems_for, pod, running, write_cgroup_cpus

from nri_pinner.edge.checkpoint import file as checkpoint_file
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from testkit.fake_runtime import NRI_V0_12_1

BODY = {"policy": "static", "shared": "0-3", "entries": []}
BIG_BODY = {"policy": "static", "shared": "0-3", "entries": [{"container_id": f"c{i:05}", "pad": "x" * 64}
                                                              for i in range(400)]}  # ~40 KiB


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "16k") -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def temps(directory: Path) -> list[Path]:
    return list(directory.glob(".*.tmp"))


def test_disk_full_keeps_the_old_checkpoint_and_leaves_no_temp_file(workdir: Path) -> None:
    with small_tmpfs(workdir / "small") as d:
        cp = d / "cp.json"
        checkpoint_file.write(cp, BODY)
        with pytest.raises(OSError) as failed:
            checkpoint_file.write(cp, BIG_BODY)
        assert failed.value.errno == 28  # ENOSPC
        assert temps(d) == []
        assert checkpoint_file.read(cp).body == BODY


def test_read_only_directory_keeps_the_old_checkpoint(workdir: Path) -> None:
    with small_tmpfs(workdir / "ro") as d:
        cp = d / "cp.json"
        checkpoint_file.write(cp, BODY)
        subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        with pytest.raises(OSError):
            checkpoint_file.write(cp, BIG_BODY)
        assert temps(d) == [] and checkpoint_file.read(cp).body == BODY


def test_dangling_symlink_is_reported_not_silently_absent(tmp_path: Path) -> None:
    cp = tmp_path / "cp.json"
    cp.symlink_to(tmp_path / "gone" / "cp.json")
    loaded = checkpoint_file.read(cp)
    assert loaded.body is None and "dangling symlink" in loaded.problem and "gone" in loaded.problem
    checkpoint_file.write(cp, BODY)  # the next write replaces the link with the file
    assert not cp.is_symlink() and checkpoint_file.read(cp).body == BODY


def test_short_writes_are_retried_until_the_whole_file_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write
    calls: list[int] = []

    def short_write(fd: int, data: bytes | memoryview) -> int:  # a real write of at most 7 bytes
        calls.append(len(data))
        return real_write(fd, bytes(data[:7]))

    monkeypatch.setattr(os, "write", short_write)
    cp = tmp_path / "cp.json"
    checkpoint_file.write(cp, BIG_BODY)
    monkeypatch.undo()
    assert len(calls) > 1000 and checkpoint_file.read(cp).body == BIG_BODY


def test_temp_file_of_a_killed_writer_is_removed_at_start(tmp_path: Path) -> None:
    cp = tmp_path / "cp.json"
    checkpoint_file.write(cp, BODY)
    stale = tmp_path / ".cp.json.4242424.tmp"
    stale.write_bytes(b'{"half')
    assert checkpoint_file.read(cp).body == BODY
    assert not stale.exists()


def test_fifo_or_device_in_place_of_the_checkpoint_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "cp.json"
    os.mkfifo(fifo)
    assert checkpoint_file.read(fifo).problem == "not a regular file"
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    assert checkpoint_file.read(link).problem == "not a regular file"


async def test_one_failing_repair_does_not_abort_the_reconcile_pass(workdir: Path) -> None:
    """The runtime answers an error status for one container's UpdateContainers; the other drifted
    container is still repaired in the same pass, and the failed one rides on the next reply (cgroup
    writes off: the repairs take the runtime's path)."""
    settings = make_settings(workdir, reconcile={"cgroup_writes": False})
    cgroups = Path(settings.reconcile.cgroup_root)
    gpod, hpod, bpod = pod("gold"), pod("hold"), pod("burst", "burstable")
    g, h, b = container(gpod, "app", 2000, 2000), container(hpod, "app", 2000, 2000), container(bpod, "app", 100)
    async with running(settings, NRI_V0_12_1, erroring_update_ids=[g.id]) as r:
        await r.conn.create_container(create(bpod, b))
        gr = await r.conn.create_container(create(gpod, g))
        hr = await r.conn.create_container(create(hpod, h))
        assert gr is not None and hr is not None
        for p, c in ((bpod, b), (gpod, g), (hpod, h)):  # only started containers are checked for drift
            assert await r.conn.state_change(api.START_CONTAINER, p, c)
        g_cpus = CPUSet.parse(gr.adjust.linux.resources.cpu.cpus)
        h_cpus = CPUSet.parse(hr.adjust.linux.resources.cpu.cpus)
        write_cgroup_cpus(cgroups, b, str(r.topology.online - g_cpus - h_cpus))
        write_cgroup_cpus(cgroups, g, str(r.topology.online))  # both drifted
        write_cgroup_cpus(cgroups, h, str(r.topology.online))
        drifts = await r.svc.reconciler.tick()  # must not raise
        assert {d.container_id for d in drifts} == {g.id, h.id}
        repaired = [u.container_id for req in r.conn.updates for u in req.update]
        assert h.id in repaired  # the other repair went through NRI
        reply = await r.conn.create_container(create(bpod, container(bpod, "later", 100)))
        assert reply is not None
        assert cpuset_updates(reply.update)[g.id] == (str(g_cpus), mems_for(r.topology, g_cpus))
