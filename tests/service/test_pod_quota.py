"""Pods' cgroups without a CFS quota (edge/cgroups/quota_writer.py, core/quotas.py): the writer on cgroup trees
built in tmp (v1 `cpu.cfs_quota_us`, v2 `cpu.max`, a systemd pod slice told through a stand-in bus), and
the service through the real stub and the fake runtime: the create's adjustment and update replies as
the runtime decodes them, the pod cgroup written by a pass and written again after a kubelet resize, and
a pod demoted for pod-level resources given its quota back (its container's in an update, its pod
cgroup's by a pass)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from dbus_peer import DBusPeer
from svc_harness import PERIOD, container, create, make_settings, pod, running
from test_cgroup_pool import start, written

from nri_pinner.core.effects import PodQuotaItem
from nri_pinner.core.events import PodQuotaResult
from nri_pinner.edge.cgroups import quota_writer
from nri_pinner.edge.cgroups.cpuset_writer import WriteCounts
from nri_pinner.edge.cgroups.quota_writer import PodQuotas
from nri_pinner.edge.cgroups.systemd_units import USEC_INFINITY, SystemdUnits, quota_per_sec
from nri_pinner.nri.gen import api_pb2 as api
from testkit.pod_builders import resize_request as resize

GPOD, BPOD = pod("gold"), pod("burst", "burstable")
G = container(GPOD, "app", 2000, 2000)  # exclusive
F = container(GPOD, "frac", 500, 500)  # the same pod, shared
B = container(BPOD, "app", 500, 1000)  # another pod, shared
SLICE = "kubepods-burstable-pod1234_5678.slice"



def cpu_dir(root: Path, cgroup: str, controller: str = "cpu") -> Path:
    d = root / controller / cgroup.strip("/")
    d.mkdir(parents=True, exist_ok=True)
    return d


def item(cgroup: str, key: str = "uid-1", quota: int | None = None, period: int = 0) -> PodQuotaItem:
    return PodQuotaItem(key, cgroup, "default/p", quota, period)


# -- the writer ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("controller", ["cpu", "cpu,cpuacct"])
def test_v1_the_quota_becomes_minus_one_and_an_unlimited_pod_is_only_read(
        tmp_path: Path, controller: str, monkeypatch: pytest.MonkeyPatch) -> None:
    quota = cpu_dir(tmp_path, "/kubepods/pod1", controller) / "cpu.cfs_quota_us"
    quota.write_text("150000\n")
    writes: list[tuple[str, str]] = []
    real = quota_writer._write

    def recording(path: str, text: str) -> None:
        writes.append((path, text))
        real(path, text)

    monkeypatch.setattr(quota_writer, "_write", recording)
    counts = WriteCounts()
    writer = PodQuotas(tmp_path, None, counts)
    [r] = writer.write([item("/kubepods/pod1")])
    assert (r.before, r.error, r.untold) == ("150000", "", "") and quota.read_text() == "-1"
    [r] = writer.write([item("/kubepods/pod1")])  # a second look only reads
    assert (r.before, r.error) == ("", "") and writes == [(str(quota), "-1")]
    assert (counts.pod_quotas, counts.pod_quota_failed) == (1, 0)


def test_v2_max_keeps_the_period(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu memory\n")
    d = tmp_path / "kubepods" / "burstable" / "pod2"
    d.mkdir(parents=True)
    (d / "cpu.max").write_text("250000 100000\n")
    writer = PodQuotas(tmp_path, None, WriteCounts())
    [r] = writer.write([item("/kubepods/burstable/pod2")])
    assert r.before == "250000 100000" and (d / "cpu.max").read_text() == "max 100000"
    assert writer.write([item("/kubepods/burstable/pod2")])[0].before == ""


def test_a_missing_pod_cgroup_is_an_error_for_that_pod_only(tmp_path: Path) -> None:
    cpu_dir(tmp_path, "/kubepods/pod1").joinpath("cpu.cfs_quota_us").write_text("100000\n")
    counts = WriteCounts()
    results = PodQuotas(tmp_path, None, counts).write([item("/kubepods/gone", "a"), item("/kubepods/pod1", "b")])
    assert "cannot read" in results[0].error and results[1].before == "100000"
    assert (counts.pod_quotas, counts.pod_quota_failed) == (1, 1)
    bad = cpu_dir(tmp_path, "/kubepods/pod3") / "cpu.cfs_quota_us"
    bad.write_text("lots\n")
    assert "not a quota" in PodQuotas(tmp_path, None, counts).write([item("/kubepods/pod3")])[0].error


def test_a_pod_slice_is_told_first_then_written(tmp_path: Path, short_dir: Path) -> None:
    """Under the systemd driver: SetUnitProperties(slice, runtime, CPUQuotaPerSecUSec=infinity), then the
    direct write into the expanded slice path; a refused call is reported, the write stands."""
    quota = cpu_dir(tmp_path, f"/kubepods.slice/kubepods-burstable.slice/{SLICE}") / "cpu.cfs_quota_us"
    seen: list[str] = []

    def answer(unit: str, props: list[object]) -> str | None:
        seen.append(quota.read_text().strip())  # what the cgroup held when systemd was told
        return "org.freedesktop.DBus.Error.AccessDenied" if unit.startswith("kubepods-besteffort") else None

    peer = DBusPeer(short_dir / "private", answer)
    units = SystemdUnits(str(short_dir / "private"), timeout=2.0)
    counts = WriteCounts()
    try:
        quota.write_text("120000\n")
        other = cpu_dir(tmp_path, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9.slice")
        (other / "cpu.cfs_quota_us").write_text("50000\n")
        writer = PodQuotas(tmp_path, units, counts)
        results = writer.write([item(SLICE, "a"), item("kubepods-besteffort-pod9.slice", "b")])
        assert [(c[0], c[1], c[2]) for c in peer.calls] == [
            ("SetUnitProperties", SLICE, True), ("SetUnitProperties", "kubepods-besteffort-pod9.slice", True)]
        assert all(c[3] == [("CPUQuotaPerSecUSec", ("t", USEC_INFINITY))] for c in peer.calls)
        assert seen[0] == "120000" and quota.read_text() == "-1"  # told first, written after
        assert results[0].untold == "" and "AccessDenied" in results[1].untold
        assert (other / "cpu.cfs_quota_us").read_text() == "-1"  # written all the same
        assert (counts.unit_calls, counts.unit_failed, counts.pod_quotas) == (1, 1, 2)
        # the re-check: a told slice without a quota is only read; the refused one is asked again
        results = writer.write([item(SLICE, "a"), item("kubepods-besteffort-pod9.slice", "b")])
        assert [c[1] for c in peer.calls[2:]] == ["kubepods-besteffort-pod9.slice"]
        assert results[0] == PodQuotaResult("a", "default/p")
        # a kubelet resize: systemd holds its new quota and the cgroup too; told again, written again
        quota.write_text("130000\n")
        [r] = writer.write([item(SLICE, "a")])
        assert [c[1] for c in peer.calls[3:]] == [SLICE] and r.before == "130000" and quota.read_text() == "-1"
    finally:
        units.close()
        peer.close()


@pytest.mark.parametrize("v1", [True, False], ids=["v1", "v2"])
def test_a_demoted_pods_quota_is_put_back(tmp_path: Path, v1: bool) -> None:
    """The kubelet's quota back into a pod cgroup a pass left without one: v1 `cpu.cfs_quota_us` "<quota>",
    v2 `cpu.max` "<quota> <period>"; written once (a cgroup that holds it is only read)."""
    if v1:
        f = cpu_dir(tmp_path, "/kubepods/pod1") / "cpu.cfs_quota_us"
        f.write_text("-1\n")
    else:
        (tmp_path / "cgroup.controllers").write_text("cpuset cpu memory\n")
        (tmp_path / "kubepods" / "pod1").mkdir(parents=True)
        f = tmp_path / "kubepods" / "pod1" / "cpu.max"
        f.write_text("max 100000\n")
    counts = WriteCounts()
    writer = PodQuotas(tmp_path, None, counts)
    [r] = writer.write([item("/kubepods/pod1", quota=250_000, period=100_000)])
    assert f.read_text() == ("250000" if v1 else "250000 100000")
    assert (r.before, r.error, r.untold, r.quota) == ("-1" if v1 else "max 100000", "", "", 250_000)
    [r] = writer.write([item("/kubepods/pod1", quota=250_000, period=100_000)])
    assert (r.before, r.error) == ("", "")
    assert (counts.pod_quotas, counts.pod_quotas_restored, counts.pod_quota_failed) == (0, 1, 0)
    missing = writer.write([item("/kubepods/gone", quota=250_000, period=100_000)])[0]
    assert "cannot read" in missing.error and missing.quota == 250_000 and counts.pod_quota_failed == 1


def test_a_pod_slice_is_told_its_quota_back_first(tmp_path: Path, short_dir: Path) -> None:
    """CPUQuotaPerSecUSec = quota x 1 s / period, rounded up to 10 ms as runc's addCpuQuota does (systemd
    writes cpu.max from it: 1 % steps), then the exact quota into the cgroup."""
    assert (quota_per_sec(250_000, 100_000), quota_per_sec(123_450, 100_000), quota_per_sec(1_000, 100_000)) == (
        2_500_000, 1_240_000, 10_000)
    quota = cpu_dir(tmp_path, f"/kubepods.slice/kubepods-burstable.slice/{SLICE}") / "cpu.cfs_quota_us"
    quota.write_text("-1\n")
    seen: list[str] = []

    def answer(unit: str, props: list[object]) -> str | None:
        seen.append(quota.read_text().strip())
        return None

    peer = DBusPeer(short_dir / "private", answer)
    units = SystemdUnits(str(short_dir / "private"), timeout=2.0)
    counts = WriteCounts()
    try:
        writer = PodQuotas(tmp_path, units, counts)
        [r] = writer.write([item(SLICE, "a", 123_450, 100_000)])
        assert [(c[1], c[3]) for c in peer.calls] == [(SLICE, [("CPUQuotaPerSecUSec", ("t", 1_240_000))])]
        assert seen == ["-1"] and quota.read_text() == "123450" and r.untold == ""
        assert (counts.unit_calls, counts.pod_quotas_restored) == (1, 1)
    finally:
        units.close()
        peer.close()


# -- the service ---------------------------------------------------------------------------------------------

def pod_quota(root: Path, p: api.PodSandbox) -> Path:
    return root / "cpu" / p.linux.cgroup_parent.strip("/") / "cpu.cfs_quota_us"


async def test_the_service_removes_the_quota_of_exclusive_containers_and_their_pods(workdir: Path) -> None:
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    # the kubelet's pod cgroups (EnsureExists under cpuManagerPolicy: none): the sum of the limits x period
    cpu_dir(root, GPOD.linux.cgroup_parent).joinpath("cpu.cfs_quota_us").write_text("250000\n")
    cpu_dir(root, BPOD.linux.cgroup_parent).joinpath("cpu.cfs_quota_us").write_text("100000\n")
    async with running(settings) as r:
        for p, c in ((BPOD, B), (GPOD, G), (GPOD, F)):
            reply = await r.conn.create_container(create(p, c))  # decoded from the bytes the stub sent
            assert reply is not None
            cpu = reply.adjust.linux.resources.cpu
            assert (cpu.HasField("quota"), cpu.quota.value) == ((True, -1) if c is G else (False, 0)), c.id
            start(root, c, cpu.cpus, cpu.mems)
            await r.conn.state_change(api.START_CONTAINER, p, c)
        await written(r.svc)
        assert pod_quota(root, GPOD).read_text() == "-1"
        assert pod_quota(root, BPOD).read_text() == "100000\n"  # no exclusive CPU in that pod: untouched

        # the kubelet resizes F: it writes the pod cgroup's quota first (-1 is below any), then updates F
        pod_quota(root, GPOD).write_text("280000\n")
        update = await r.conn.update_container(resize(F, GPOD, 800))
        assert update is not None and not update.update[0].linux.resources.cpu.HasField("quota")
        await written(r.svc)
        assert pod_quota(root, GPOD).read_text() == "-1"

        # a grow of G: -1 in its own update; then G to shared: the kubelet's 1500m x period goes through
        update = await r.conn.update_container(resize(G, GPOD, 3000))
        assert update is not None and update.update[0].linux.resources.cpu.quota.value == -1
        pod_quota(root, GPOD).write_text("230000\n")  # (1500m + 800m) x period, the kubelet's at to-shared
        update = await r.conn.update_container(resize(G, GPOD, 1500))
        assert update is not None and not update.update[0].linux.resources.cpu.HasField("quota")
        await written(r.svc)
        await asyncio.sleep(1.3)  # past the re-check a resize arms: no exclusive CPU left, left alone
        await written(r.svc)
        assert pod_quota(root, GPOD).read_text() == "230000\n"
        health = r.svc.document()["health"]["cgroup_writes"]
        assert (health["pod_quotas"], health["pod_quota_failed"]) == (2, 0)
        assert r.svc.plugin.core.node.containers[G.id].cfs_quota == 1500 * PERIOD // 1000


async def test_a_pod_shown_to_use_pod_level_resources_gets_its_quotas_back(workdir: Path) -> None:
    """spec.resources 2 CPUs (the sandbox's quota 200000 per 100000, the kubelet's pod cgroup the same);
    two containers without their own limits, each given the pod's. The first is pinned: -1 in its
    adjustment, the pod cgroup's quota removed. The second shows the pod: the first goes to the shared
    pool with its 200000 back in an update on the second's reply, and the pass puts the pod's back."""
    plr = pod("plr")
    plr.linux.pod_resources.cpu.quota.value, plr.linux.pod_resources.cpu.period.value = 2 * PERIOD, PERIOD
    a, b = container(plr, "a", 2000, 2000), container(plr, "b", 2000, 2000)
    settings = make_settings(workdir)
    root = Path(settings.reconcile.cgroup_root)
    cpu_dir(root, plr.linux.cgroup_parent).joinpath("cpu.cfs_quota_us").write_text("200000\n")
    async with running(settings) as r:
        reply = await r.conn.create_container(create(plr, a))
        assert reply is not None and reply.adjust.linux.resources.cpu.quota.value == -1
        start(root, a, reply.adjust.linux.resources.cpu.cpus, reply.adjust.linux.resources.cpu.mems)
        await r.conn.state_change(api.START_CONTAINER, plr, a)
        await written(r.svc)
        assert pod_quota(root, plr).read_text() == "-1"

        reply = await r.conn.create_container(create(plr, b))
        assert reply is not None and not reply.adjust.linux.resources.cpu.HasField("quota")
        [update] = [u for u in reply.update if u.container_id == a.id]
        assert update.linux.resources.cpu.quota.value == 2 * PERIOD
        assert update.linux.resources.cpu.cpus == str(r.topology.online)
        await written(r.svc)
        assert pod_quota(root, plr).read_text() == "200000"
        health = r.svc.document()["health"]["cgroup_writes"]
        assert (health["pod_quotas"], health["pod_quotas_restored"], health["pod_quota_failed"]) == (1, 1, 0)
