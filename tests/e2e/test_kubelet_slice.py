"""The kubelet's pod slice under the systemd driver (kubelet_slice.py), without systemd: the unit and
its parent from the cgroup name the kubelet sends, the properties of Apply(-1) and Set (runc's systemd
manager), the fs2 cpu.max text, and the D-Bus messages as systemd would parse them. The calls themselves
run in the VM tier's guest (test_quota_e2e.py under NRI_PINNER_E2E_CGROUP_DRIVER=systemd). Pure: no
containerd, no root."""

from __future__ import annotations

from pathlib import Path

import pytest
from jeepney import HeaderFields, Parser

from nri_pinner.edge.cgroups.systemd_units import USEC_INFINITY, quota_per_sec

from . import kubelet_model as km
from . import kubelet_slice as ks

UID = "0a0a0a0a-1111-4000-8000-000000000001"
UNIT = "kubepods-pod0a0a0a0a_1111_4000_8000_000000000001.slice"


def test_the_unit_and_its_parent_from_the_cgroup_name_the_kubelet_sends() -> None:
    guaranteed = km.cgroup_parent(km.QOSClass.GUARANTEED, UID, "systemd")
    assert guaranteed == f"/kubepods.slice/{UNIT}"
    assert ks.unit_and_parent(guaranteed) == (UNIT, "kubepods.slice")
    burstable = km.cgroup_parent(km.QOSClass.BURSTABLE, UID, "systemd")
    assert ks.unit_and_parent(burstable) == (UNIT.replace("kubepods-", "kubepods-burstable-"),
                                             "kubepods-burstable.slice")
    assert ks.unit_and_parent("/top.slice") == ("top.slice", "-.slice")
    assert ks.cgroup_dir(guaranteed) == ks.CGROUP_V2_ROOT / "kubepods.slice" / UNIT


def test_cpu_weight_is_the_kubelets_conversion_of_shares() -> None:
    assert [ks.cpu_weight(s) for s in (2, 1024, 1536, 262144, 300000)] == [1, 39, 59, 10000, 10000]


def test_apply_starts_a_slice_wanting_its_parent_with_accounting_and_no_resources() -> None:
    assert ks.apply_properties(UNIT, "kubepods.slice") == [
        ("Description", ("s", f"libcontainer container {UNIT}")), ("Wants", ("as", ["kubepods.slice"])),
        ("MemoryAccounting", ("b", True)), ("CPUAccounting", ("b", True)), ("IOAccounting", ("b", True)),
        ("TasksAccounting", ("b", True)), ("DefaultDependencies", ("b", False))]


def test_set_of_the_test_pod_and_of_its_resize() -> None:
    # 1 CPU + 500m, 64 MiB each: ResourceConfigForPod shares 1536, quota 150000, memory 128 MiB
    res = ks.PodResources(km.milli_cpu_to_shares(1500), 150_000, 100_000, 128 << 20)
    assert ks.set_properties(res) == [
        ("MemoryMax", ("t", 128 << 20)), ("CPUWeight", ("t", 59)),
        ("CPUQuotaPeriodUSec", ("t", 100_000)), ("CPUQuotaPerSecUSec", ("t", 1_500_000))]
    assert ks.set_properties(ks.PodResources(0, 170_000, 100_000)) == [
        ("CPUQuotaPeriodUSec", ("t", 100_000)), ("CPUQuotaPerSecUSec", ("t", 1_700_000))]


def test_add_cpu_quota_rounds_up_to_whole_percents_and_no_quota_is_infinity() -> None:
    assert ks.quota_properties(-1, 100_000) == [("CPUQuotaPeriodUSec", ("t", 100_000)),
                                                ("CPUQuotaPerSecUSec", ("t", USEC_INFINITY))]
    assert ks.quota_properties(0, 0) == []
    assert ks.quota_properties(150_001, 100_000)[1] == ("CPUQuotaPerSecUSec", ("t", 1_510_000))
    for quota in (1000, 50_000, 150_001, 333_333):  # the plugin's own conversion agrees
        assert ks.quota_properties(quota, 100_000)[1][1][1] == quota_per_sec(quota, 100_000)


def test_cpu_max_as_fs2_writes_it() -> None:
    assert ks.cpu_max(150_000, 100_000) == "150000 100000"
    assert ks.cpu_max(-1, 100_000) == "max 100000"
    assert ks.cpu_max(0, 0) == "max"


def test_the_messages_parse_as_systemd_reads_them() -> None:
    res = ks.PodResources(1536, 150_000, 100_000, 128 << 20)
    for msg, member, body in (
            (ks.start_call(UNIT, "kubepods.slice"), "StartTransientUnit",
             (UNIT, "replace", ks.apply_properties(UNIT, "kubepods.slice"), [])),
            (ks.set_call(UNIT, ks.set_properties(res)), "SetUnitProperties", (UNIT, True, ks.set_properties(res)))):
        parser = Parser()
        parser.add_data(msg.serialise(serial=7))
        got = parser.get_next_message()
        assert got is not None and got.header.fields[HeaderFields.member] == member
        assert got.header.fields[HeaderFields.destination] == "org.freedesktop.systemd1"
        assert got.body == body


def test_create_cgroup_path_makes_the_directories_and_enables_the_controllers_above(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu memory\n")
    monkeypatch.setattr(ks, "CGROUP_V2_ROOT", tmp_path)
    ks.create_cgroup_path(tmp_path / "kubepods" / "pod1")
    assert (tmp_path / "kubepods" / "pod1").is_dir()
    for above in (tmp_path, tmp_path / "kubepods"):
        assert (above / "cgroup.subtree_control").read_text() == "+cpuset +cpu +memory"
    assert not (tmp_path / "kubepods" / "pod1" / "cgroup.subtree_control").exists()
