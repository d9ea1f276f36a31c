from pathlib import Path

import pytest

from nri_pinner.edge.cgroups.paths import CgroupError, cpuset_dir, expand_systemd_slice, read_cpus, relative_cgroup_path
from nri_pinner.engine.cpuset import CPUSet


def test_systemd_slice_nesting() -> None:
    assert expand_systemd_slice("kubepods-burstable-pod12_ab.slice") == (
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_ab.slice")
    assert expand_systemd_slice("-.slice") == "/"


def test_both_driver_spellings() -> None:
    assert relative_cgroup_path("/kubepods/burstable/pod1/abc") == "/kubepods/burstable/pod1/abc"
    assert relative_cgroup_path("kubepods-pod1.slice:cri-containerd:abc") == (
        "/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope")


def test_v1_and_v2_layouts(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    d = v1 / "cpuset" / "kubepods" / "pod1" / "abc"
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text("0-1,3\n")
    assert cpuset_dir(v1, "/kubepods/pod1/abc") == d
    assert read_cpus(v1, "/kubepods/pod1/abc") == CPUSet([0, 1, 3])
    v2 = tmp_path / "v2"
    d2 = v2 / "kubepods.slice" / "kubepods-pod1.slice" / "cri-containerd-abc.scope"
    d2.mkdir(parents=True)
    (d2 / "cpuset.cpus").write_text("2\n")
    assert read_cpus(v2, "kubepods-pod1.slice:cri-containerd:abc") == CPUSet([2])


def test_missing_and_garbage(tmp_path: Path) -> None:
    with pytest.raises(CgroupError, match="cannot read"):
        read_cpus(tmp_path, "/kubepods/none")
    d = tmp_path / "cpuset" / "x"
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text("zz")
    with pytest.raises(CgroupError, match="bad CPU id"):
        read_cpus(tmp_path, "/x")
