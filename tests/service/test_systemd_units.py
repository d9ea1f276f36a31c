"""Telling systemd the cpusets written into container scopes (nri_pinner/edge/cgroups/systemd_units.py).

The bus peer is a stand-in (tests/service/dbus_peer.py): systemd is not PID 1 on this machine. What
real systemd 257 does with these calls is checked in the VM tier (tests/vm)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dbus_peer import DBusPeer
from jeepney import HeaderFields, Parser
from svc_harness import container, cpuset_updates, create, make_settings, pod, running

from nri_pinner.edge.cgroups import systemd_units
from nri_pinner.edge.cgroups.cpuset_writer import CpusetWriter, unwritable
from nri_pinner.edge.cgroups.paths import relative_cgroup_path
from nri_pinner.edge.cgroups.systemd_units import SystemdUnits, cpu_mask, scope_unit, set_properties_call
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api

SCOPE_PATH = "kubepods-burstable-pod1234_5678.slice:cri-containerd:abc123"



def test_scope_unit_follows_runcs_naming_and_skips_cgroupfs_paths() -> None:
    assert scope_unit(SCOPE_PATH) == "cri-containerd-abc123.scope"
    assert scope_unit("system.slice:docker:abc") == "docker-abc.scope"
    assert scope_unit("kubepods.slice::abc") == "abc.scope"
    assert scope_unit("kubepods.slice:cri-containerd:kubepods-x.slice") == "kubepods-x.slice"
    assert scope_unit("/kubepods/burstable/pod1/abc") is None
    assert scope_unit("") is None and scope_unit("a:b") is None


def test_cpu_mask_is_systemds_little_endian_bitmask() -> None:
    assert cpu_mask(CPUSet.parse("0-1,9")) == bytes([0b11, 0b10])
    assert cpu_mask(CPUSet.parse("4-7")) == bytes([0xF0])
    assert cpu_mask(CPUSet.parse("63")) == bytes(7) + bytes([0x80])
    assert cpu_mask(CPUSet()) == b""


def test_the_call_is_set_unit_properties_at_runtime() -> None:
    msg = set_properties_call("cri-containerd-abc.scope", CPUSet.parse("2-3"), CPUSet.parse("1"))
    parsed = Parser().feed(msg.serialise(serial=7))[0]
    fields = parsed.header.fields
    assert fields[HeaderFields.member] == "SetUnitProperties"
    assert fields[HeaderFields.destination] == "org.freedesktop.systemd1"
    assert fields[HeaderFields.path] == "/org/freedesktop/systemd1"
    assert fields[HeaderFields.signature] == "sba(sv)"
    assert parsed.body == ("cri-containerd-abc.scope", True,
                           [("AllowedCPUs", ("ay", bytes([0b1100]))), ("AllowedMemoryNodes", ("ay", bytes([0b10])))])


def test_one_pass_sends_every_call_before_reading_and_reports_only_refusals(short_dir: Path) -> None:
    peer = DBusPeer(short_dir / "private",
                    lambda unit, props: "org.freedesktop.systemd1.NoSuchUnit" if unit == "gone.scope" else None)
    units = SystemdUnits(str(short_dir / "private"), timeout=2.0)
    try:
        items = [(f"c{i}.scope", CPUSet.parse("0-3"), None) for i in range(50)] + [("gone.scope", CPUSet([1]), None)]
        failed = units.agree(items)
        assert list(failed) == ["gone.scope"] and "NoSuchUnit" in failed["gone.scope"]
        assert len(peer.calls) == 51 and all(runtime for _, _, runtime, _ in peer.calls)
        assert max(peer.batches) > 1  # pipelined: the peer read several calls at once
        assert units.agree([("c0.scope", CPUSet([0]), CPUSet([0]))]) == {}
        assert peer.connections == 1  # the connection is kept between passes
        assert peer.calls[-1][3] == [("AllowedCPUs", ("ay", b"\x01")), ("AllowedMemoryNodes", ("ay", b"\x01"))]
    finally:
        units.close()
        peer.close()


def test_an_unanswered_call_fails_after_the_timeout_and_its_late_answer_is_ignored(short_dir: Path) -> None:
    slow = {"slow.scope"}
    peer = DBusPeer(short_dir / "private", lambda unit, props: "silence" if unit in slow else None)
    units = SystemdUnits(str(short_dir / "private"), timeout=0.2)
    try:
        began = time.monotonic()
        failed = units.agree([("slow.scope", CPUSet([0]), None), ("ok.scope", CPUSet([0]), None)])
        assert list(failed) == ["slow.scope"] and "no answer" in failed["slow.scope"]
        assert time.monotonic() - began < 1.5
        slow.clear()
        assert units.agree([("slow.scope", CPUSet([1]), None)]) == {}
    finally:
        units.close()
        peer.close()


def test_a_missing_bus_fails_every_unit_and_is_not_asked_again_at_once(short_dir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    units = SystemdUnits(str(short_dir / "private"), timeout=0.2)
    failed = units.agree([("a.scope", CPUSet([0]), None)])
    assert "cannot connect" in failed["a.scope"]
    peer = DBusPeer(short_dir / "private")  # appears now: the retry waits out RETRY_CONNECT_SECONDS
    try:
        assert "unavailable" in units.agree([("a.scope", CPUSet([0]), None)])["a.scope"]
        assert peer.connections == 0
        monkeypatch.setattr(systemd_units, "RETRY_CONNECT_SECONDS", 0.0)
        units._down_until = 0.0
        assert units.agree([("a.scope", CPUSet([0]), None)]) == {}
    finally:
        units.close()
        peer.close()


def test_a_message_bus_gets_hello_first(short_dir: Path) -> None:
    peer = DBusPeer(short_dir / "system_bus_socket")
    units = SystemdUnits(str(short_dir / "system_bus_socket"), timeout=1.0)
    try:
        assert units.agree([("a.scope", CPUSet([0]), None)]) == {}
        assert [c[1] for c in peer.calls] == ["a.scope"]  # Hello was answered by the peer, then the call
    finally:
        units.close()
        peer.close()


def test_the_writer_asks_only_about_scopes_and_counts(short_dir: Path) -> None:
    seen: list[tuple[str, Any]] = []

    def answer(unit: str, props: list[Any]) -> str | None:
        seen.append((unit, props))
        return "org.freedesktop.DBus.Error.AccessDenied" if unit.startswith("cri-containerd-bad") else None

    peer = DBusPeer(short_dir / "private", answer)
    writer = CpusetWriter(short_dir / "cgroup", units=SystemdUnits(str(short_dir / "private"), timeout=1.0))
    try:
        bad = SCOPE_PATH.replace("abc123", "bad")
        untold = writer.tell_systemd([(SCOPE_PATH, CPUSet.parse("0-1"), (0,)), (bad, CPUSet.parse("0-1"), ()),
                                      ("/kubepods/burstable/pod1/ctr", CPUSet.parse("0-1"), ())])
        assert list(untold) == [bad] and "AccessDenied" in untold[bad]
        assert [u for u, _ in seen] == ["cri-containerd-abc123.scope", "cri-containerd-bad.scope"]
        assert (writer.counts.unit_calls, writer.counts.unit_failed) == (1, 1)
        assert writer.stats()["unit_calls"] == 1
    finally:
        writer.close()
        peer.close()


def test_root_without_capabilities_may_write_cgroups() -> None:
    """The packaged unit runs root with an empty capability bounding set. The kernel's cgroup
    directories are r-x for everyone, so access(W_OK) said "not writable" and writes were turned
    off, though opening a cgroup file for writing succeeds: the real tree, the real kernel."""
    tree = any(Path(p, "cgroup.procs").exists() for p in ("/sys/fs/cgroup", "/sys/fs/cgroup/cpuset"))
    if os.geteuid() != 0 or not shutil.which("setpriv") or not tree:
        pytest.skip("needs root, setpriv and a mounted cgroup tree")
    probe = ("from nri_pinner.edge.cgroups.cpuset_writer import unwritable; "
             "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0]); "
             "print(repr(unwritable('/sys/fs/cgroup')))")
    out = subprocess.run(["setpriv", "--bounding-set=-all", "--inh-caps=-all", sys.executable, "-c", probe],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "0000000000000000"  # really no capability
    assert out[1] == "''"


def test_an_unopenable_cgroup_tree_turns_writes_off(tmp_path: Path) -> None:
    (tmp_path / "cgroup.procs").mkdir()  # EISDIR for anyone, root included
    assert "cannot be opened for writing" in unwritable(tmp_path)
    assert unwritable(tmp_path / "absent") == ""


# -- the service: a pool change under the systemd driver ------------------------------------------

def systemd_driver(c: api.Container, p: api.PodSandbox) -> api.Container:
    """The container as containerd reports it under the systemd cgroup driver (kubelet pod slice)."""
    c.linux.cgroups_path = f"kubepods-burstable-pod{p.uid.replace('-', '_')}.slice:cri-containerd:{c.id}"
    return c


async def test_a_pool_change_tells_systemd_before_it_writes_and_falls_back_when_refused(
        workdir: Path, short_dir: Path) -> None:
    refuse: set[str] = set()
    order: list[str] = []
    bpod, gpod = pod("burst", "burstable"), pod("gold")
    b, b2 = systemd_driver(container(bpod, "app", 100), bpod), systemd_driver(container(bpod, "side", 100), bpod)
    g = systemd_driver(container(gpod, "app", 2000, 2000), gpod)
    settings = make_settings(workdir, reconcile={"systemd_bus": str(short_dir / "private")})
    root = Path(settings.reconcile.cgroup_root)

    def cgroup(c: api.Container) -> Path:
        return root / "cpuset" / relative_cgroup_path(c.linux.cgroups_path).strip("/")

    def answer(unit: str, props: list[Any]) -> str | None:
        if unit.endswith(".scope"):  # the cgroup when systemd is told
            order.append(f"{unit} {(cgroup(b) / 'cpuset.cpus').read_text().strip()}")
        return "org.freedesktop.DBus.Error.AccessDenied" if unit in refuse else None

    peer = DBusPeer(short_dir / "private", answer)
    # G's pod slice as the kubelet made it (cgroup v1 cpu controller): its quota, the limits' sum
    pod_quota = root / "cpu" / relative_cgroup_path(g.linux.cgroups_path).strip("/").rpartition("/")[0]
    pod_quota.mkdir(parents=True)
    (pod_quota / "cpu.cfs_quota_us").write_text("200000\n")
    try:
        async with running(settings) as r:
            online = r.topology.online
            for c in (b, b2):
                await r.conn.create_container(create(bpod, c))
                d = cgroup(c)
                d.mkdir(parents=True)
                (d / "cpuset.cpus").write_text(f"{online}\n")
                (d / "cpuset.mems").write_text("0-1\n")
                await r.conn.state_change(api.START_CONTAINER, bpod, c)
            refuse.add(f"cri-containerd-{b2.id}.scope")
            reply = await r.conn.create_container(create(gpod, g))
            assert reply is not None
            pool = online - CPUSet.parse(reply.adjust.linux.resources.cpu.cpus)
            await r.conn.state_change(api.START_CONTAINER, gpod, g)
            # both scopes told the new pool, while B's cgroup still held the old one: systemd first
            assert sorted(order) == sorted(f"cri-containerd-{c.id}.scope {online}" for c in (b, b2))
            masks = {unit: dict(props) for _, unit, _, props in peer.calls}
            assert masks[f"cri-containerd-{b.id}.scope"]["AllowedCPUs"] == ("ay", cpu_mask(pool))
            # G's pod slice: no CFS quota, held by systemd, then written
            slice_unit = g.linux.cgroups_path.split(":")[0]
            assert masks[slice_unit] == {"CPUQuotaPerSecUSec": ("t", (1 << 64) - 1)}
            assert (pod_quota / "cpu.cfs_quota_us").read_text() == "-1"
            for c in (b, b2):  # both written directly all the same: pinned now
                assert CPUSet.parse((cgroup(c) / "cpuset.cpus").read_text()) == pool
            # the refused one rides on the next reply as an NRI update (runc then tells systemd)
            late = systemd_driver(container(bpod, "late", 100), bpod)
            nxt = await r.conn.create_container(create(bpod, late))
            assert nxt is not None and set(cpuset_updates(nxt.update)) == {b2.id}
            health = r.svc.document()["health"]["cgroup_writes"]
            assert (health["unit_calls"], health["unit_failed"]) == (2, 1)  # B's scope and G's pod slice
    finally:
        peer.close()


async def test_a_drift_repair_tells_systemd_first_and_uses_the_runtime_when_refused(
        workdir: Path, short_dir: Path) -> None:
    """The repair timer rewrites a drifted scope's cgroup; under the systemd driver it tells systemd
    the set before writing (else the next re-application of the scope undoes the repair), and a scope
    systemd refuses goes to the runtime, whose update tells systemd."""
    refuse: set[str] = set()
    seen: list[str] = []
    bpod = pod("burst", "burstable")
    b = systemd_driver(container(bpod, "app", 100), bpod)
    settings = make_settings(workdir, reconcile={"systemd_bus": str(short_dir / "private")})
    cpuset = Path(settings.reconcile.cgroup_root) / "cpuset" / relative_cgroup_path(b.linux.cgroups_path).strip("/")

    def answer(unit: str, props: list[Any]) -> str | None:
        seen.append(f"{unit} {(cpuset / 'cpuset.cpus').read_text().strip()} {dict(props)['AllowedCPUs'][1].hex()}")
        return "org.freedesktop.DBus.Error.AccessDenied" if unit in refuse else None

    peer = DBusPeer(short_dir / "private", answer)
    try:
        async with running(settings) as r:
            online = r.topology.online
            await r.conn.create_container(create(bpod, b))
            cpuset.mkdir(parents=True)
            (cpuset / "cpuset.mems").write_text("0\n")
            (cpuset / "cpuset.cpus").write_text(f"{online}\n")
            await r.conn.state_change(api.START_CONTAINER, bpod, b)
            drifted = CPUSet.parse(str(min(online)))  # someone narrowed it
            unit = f"cri-containerd-{b.id}.scope"
            for attempt, path in ((1, "cgroup"), (2, "next-reply")):
                seen.clear()
                if attempt == 2:
                    refuse.add(unit)
                (cpuset / "cpuset.cpus").write_text(f"{drifted}\n")
                [drift] = await r.svc.reconciler.tick()
                assert (drift.actual, drift.desired) == (drifted, online)
                # systemd was told the whole pool while the cgroup still held the drifted set
                assert seen == [f"{unit} {drifted} {cpu_mask(online).hex()}"]
                repaired = r.svc.metrics.registry.get_sample_value("nri_pinner_reconcile_repairs_total",
                                                                   {"path": path})
                assert repaired == 1, path
            # the cgroup was repaired both times; the refused scope's set also rides on the next reply
            assert CPUSet.parse((cpuset / "cpuset.cpus").read_text()) == online
            nxt = await r.conn.create_container(create(bpod, systemd_driver(container(bpod, "late", 100), bpod)))
            assert nxt is not None and b.id in cpuset_updates(nxt.update)
    finally:
        peer.close()
