"""Direct cpuset writes (edge/cgroups/cpuset_writer.py).

Two kinds of tree:
- trees this test builds in tmp, in the layouts the kubelet makes for each cgroup driver on cgroup
  v1 and v2. Plain files do not refuse anything, so `kernel_v1_rule` checks after every write what
  the cgroup-v1 kernel enforces (a cpuset cgroup's children stay inside it) — a model of the kernel,
  used because v2 and the systemd driver cannot run on the test VM;
- a real cgroup-v1 cpuset hierarchy (root only, skipped elsewhere), where the kernel itself refuses
  a wrong order with EBUSY and a process in a nested cgroup shows what it may run on.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nri_pinner.edge.cgroups import cpuset_writer
from nri_pinner.edge.cgroups.cpuset_writer import CpusetWriter, unwritable
from nri_pinner.edge.cgroups.paths import CgroupError
from nri_pinner.engine.cpuset import CPUSet

UID, CID = "0f1e2d3c_4b5a", "c0ffee"


def layout(driver: str, uid: str = UID) -> tuple[str, str]:
    """(NRI linux.cgroups_path as containerd reports it, the container's path below the hierarchy)."""
    if driver == "cgroupfs":
        return f"/kubepods/burstable/pod{uid}/{CID}", f"kubepods/burstable/pod{uid}/{CID}"
    return (f"kubepods-burstable-pod{uid}.slice:cri-containerd:{CID}",
            f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/cri-containerd-{CID}.scope")


ALL = CPUSet.parse("0-15")


def build(root: Path, version: int, driver: str, cpus: str, nested: tuple[str, ...] = (),
          uid: str = UID) -> tuple[str, Path]:
    """A kubelet-shaped tree: on v1 every level holds cpuset files (pod cgroups keep every CPU);
    on v2 only the container sets its own. Returns (cgroups_path, container directory)."""
    nri_path, rel = layout(driver, uid)
    base = root / "cpuset" if version == 1 else root
    if version == 2:
        root.mkdir(parents=True, exist_ok=True)
        (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    d = base
    for part in rel.split("/"):
        d = d / part
        d.mkdir(parents=True, exist_ok=True)
        if version == 1 or part == rel.split("/")[-1]:
            (d / "cpuset.cpus").write_text(f"{ALL}\n")
            (d / "cpuset.mems").write_text("0-1\n")
    (d / "cpuset.cpus").write_text(cpus + "\n")
    child = d
    for name in nested:
        child = child / name
        child.mkdir()
        (child / "cpuset.cpus").write_text(cpus + "\n")
        (child / "cpuset.mems").write_text("0-1\n")
    return nri_path, d


def read(d: Path, name: str = "cpuset.cpus") -> CPUSet:
    return CPUSet.parse((d / name).read_text())


@pytest.fixture
def kernel_v1_rule(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, CPUSet]]:
    """Record every write and check, as the v1 kernel does, that it keeps children inside parents."""
    writes: list[tuple[Path, CPUSet]] = []
    real = cpuset_writer.OpenFiles.write

    def checked(self: cpuset_writer.OpenFiles, path_text: str, text: str, keep: bool = True) -> None:
        path, value = Path(path_text), CPUSet.parse(text)
        d = path.parent
        if "cpuset" not in path.parts:  # cgroup v2: no such rule
            pass
        elif (d.parent / path.name).exists() and not value.issubset(read(d.parent, path.name)):
            raise CgroupError(f"EINVAL: {value} not inside the parent's {read(d.parent, path.name)}")
        for child in (c for c in d.iterdir() if c.is_dir() and "cpuset" in path.parts):
            if not read(child, path.name).issubset(value):
                raise CgroupError(f"EBUSY: child {child.name} holds {read(child, path.name)}")
        writes.append((path, value))
        real(self, path_text, text, keep)

    monkeypatch.setattr(cpuset_writer.OpenFiles, "write", checked)
    return writes


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_shrink_and_widen_each_layout(tmp_path: Path, version: int, driver: str,
                                      kernel_v1_rule: list[tuple[Path, CPUSet]]) -> None:
    path, d = build(tmp_path, version, driver, "1-15")
    w = CpusetWriter(tmp_path)
    assert w.v1 is (version == 1)
    w.apply(path, CPUSet.parse("1,4-15"), (0,))
    assert read(d) == CPUSet.parse("1,4-15") and read(d, "cpuset.mems") == CPUSet([0])
    w.apply(path, CPUSet.parse("1-15"), (0, 1))
    assert read(d) == CPUSet.parse("1-15") and read(d, "cpuset.mems") == CPUSet([0, 1])
    # the pod cgroups are never touched: the kubelet keeps every CPU there
    parents = {p.parent for p, _ in kernel_v1_rule}
    assert parents == {d}
    w.apply(path, CPUSet.parse("1-15"), (0, 1))  # nothing to do: nothing written
    assert len(kernel_v1_rule) == 4 and w.counts.writes == 4 and w.counts.containers == 3


def test_a_change_that_adds_and_removes_goes_through_the_union(
        tmp_path: Path, kernel_v1_rule: list[tuple[Path, CPUSet]]) -> None:
    path, d = build(tmp_path, 1, "cgroupfs", "1-7", nested=("inner",))
    CpusetWriter(tmp_path).apply(path, CPUSet.parse("4-11"), ())
    assert [(p.parent.name, str(v)) for p, v in kernel_v1_rule] == [
        (CID, "1-11"), ("inner", "4-7"), (CID, "4-11")]
    assert read(d) == CPUSet.parse("4-11") and read(d / "inner") == CPUSet.parse("4-7")


def test_v1_nested_cgroups_are_narrowed_first_deepest_first(
        tmp_path: Path, kernel_v1_rule: list[tuple[Path, CPUSet]]) -> None:
    path, d = build(tmp_path, 1, "systemd", "1-15", nested=("init.scope", "deeper"))
    (d / "other").mkdir()
    (d / "other" / "cpuset.cpus").write_text("2-3\n")
    (d / "other" / "cpuset.mems").write_text("0\n")
    w = CpusetWriter(tmp_path)
    w.apply(path, CPUSet.parse("3-15"), ())
    order = [p.parent.name for p, _ in kernel_v1_rule]
    assert order.index("deeper") < order.index("init.scope") < order.index(d.name)
    assert read(d / "other") == CPUSet([3])  # kept what it could of its own choice
    assert read(d / "init.scope" / "deeper") == CPUSet.parse("3-15")
    assert w.counts.nested == 1
    w.apply(path, CPUSet.parse("1-15"), ())  # a widen leaves nested cgroups as their owner set them
    assert read(d) == CPUSet.parse("1-15") and read(d / "init.scope") == CPUSet.parse("3-15")


def test_v2_ignores_nested_cgroups(tmp_path: Path, kernel_v1_rule: list[tuple[Path, CPUSet]]) -> None:
    path, d = build(tmp_path, 2, "systemd", "1-15", nested=("inner",))
    CpusetWriter(tmp_path).apply(path, CPUSet.parse("5-6"), ())
    assert [p.parent.name for p, _ in kernel_v1_rule] == [d.name]
    assert read(d / "inner") == CPUSet.parse("1-15")  # v2: the kernel intersects; nothing to do


def test_failures_are_errors_the_caller_falls_back_on(tmp_path: Path) -> None:
    w = CpusetWriter(tmp_path)
    with pytest.raises(CgroupError, match="No such file"):  # not started yet, or gone
        w.apply(layout("cgroupfs")[0], CPUSet([1]), (0,))
    with pytest.raises(CgroupError, match="no cgroups path"):
        w.apply("", CPUSet([1]), (0,))
    path, d = build(tmp_path, 1, "cgroupfs", "1-3")
    (d / "cpuset.mems").unlink()
    with pytest.raises(CgroupError, match=r"cpuset\.mems"):
        w.apply(path, CPUSet([1]), (0,))
    assert w.counts.failed == 3 and w.counts.containers == 0


def open_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_descriptors_stay_open_between_writes_and_close_when_the_container_goes(tmp_path: Path) -> None:
    paths = [build(tmp_path, 1, "cgroupfs", "1-15", uid=f"{UID}{i}") for i in range(3)]
    w = CpusetWriter(tmp_path)
    before = open_count()
    for cpus in ("1-3", "1", "1-15", "2"):  # shorter text after longer: the rest of the file must go
        for path, _ in paths:
            w.apply(path, CPUSet.parse(cpus), ())
        assert all(read(d) == CPUSet.parse(cpus) for _, d in paths)
        assert (paths[0][1] / "cpuset.cpus").read_text() == cpus
    assert len(w.files) == 3 and open_count() == before + 3  # one per container, reused
    w.retain([paths[0][0], paths[2][0]])  # the middle container went away
    assert len(w.files) == 2 and open_count() == before + 2
    w.close()
    assert len(w.files) == 0 and open_count() == before


def test_descriptors_past_the_limit_close_the_oldest(tmp_path: Path) -> None:
    files = cpuset_writer.OpenFiles(limit=2)
    names = [tmp_path / f"f{i}" for i in range(4)]
    before = open_count()
    for n in names:
        n.write_text("x")
        files.write(str(n), "1-2")
    assert len(files) == 2 and open_count() == before + 2
    assert all(n.read_text() == "1-2" for n in names)
    files.write(str(names[0]), "3", keep=False)  # not kept: opened and closed
    assert names[0].read_text() == "3" and len(files) == 2 and open_count() == before + 2
    files.close()


def test_a_failed_write_drops_its_descriptor(tmp_path: Path) -> None:
    files = cpuset_writer.OpenFiles(limit=8)
    before = open_count()
    with pytest.raises(CgroupError, match="No space left"):  # /dev/full refuses every write, as a refusing cgroup
        files.write("/dev/full", "1")
    assert len(files) == 0 and open_count() == before
    with pytest.raises(CgroupError, match="cannot open"):
        files.write(str(tmp_path / "absent"), "1")
    assert len(files) == 0 and open_count() == before


@pytest.mark.parametrize(("top_flag", "skip", "cleared"), [("1", True, True), ("0", True, False), ("1", False, False)])
def test_v1_load_balance_flag_cleared_only_while_the_top_cpuset_balances(
        tmp_path: Path, top_flag: str, skip: bool, cleared: bool) -> None:
    path, d = build(tmp_path, 1, "cgroupfs", "1-15")
    (tmp_path / "cpuset" / "cpuset.sched_load_balance").write_text(top_flag + "\n")
    for level in (d.parent.parent, d.parent, d):  # every level has the flag set, as the kernel makes them
        (level / "cpuset.sched_load_balance").write_text("1\n")
    w = CpusetWriter(tmp_path, skip_v1_rebuilds=skip)
    w.apply(path, CPUSet.parse("2-15"), ())
    assert (d / "cpuset.sched_load_balance").read_text().strip() == ("0" if cleared else "1")
    assert (d.parent / "cpuset.sched_load_balance").read_text().strip() == "1"  # the pod's is the kubelet's
    assert w.counts.balance_cleared == int(cleared)
    (d / "cpuset.sched_load_balance").write_text("1\n")
    w.apply(path, CPUSet.parse("1-15"), ())  # looked at once per container, not on every write
    assert (d / "cpuset.sched_load_balance").read_text().strip() == "1"
    w.close()


def test_v2_has_no_load_balance_flag_to_clear(tmp_path: Path) -> None:
    path, d = build(tmp_path, 2, "systemd", "1-15")
    (tmp_path / "cpuset.sched_load_balance").write_text("1\n")  # no such file on v2: never read
    w = CpusetWriter(tmp_path)
    w.apply(path, CPUSet.parse("2-15"), ())
    assert w.counts.balance_cleared == 0 and not (d / "cpuset.sched_load_balance").exists()
    w.close()


# ------------------------------------------------------------------------------ real cgroup v1

REAL = Path("/sys/fs/cgroup")


def _real_v1() -> bool:
    cpus = REAL / "cpuset" / "cpuset.cpus"
    return os.geteuid() == 0 and cpus.exists() and len(CPUSet.parse(cpus.read_text())) >= 2


@pytest.fixture
def real_tree() -> Iterator[Path]:
    if not _real_v1():
        pytest.skip("needs root and a cgroup-v1 cpuset hierarchy with 2+ CPUs")
    top = REAL / "cpuset" / f"nri-pinner-test-{os.getpid()}"
    dirs = [top, top / "pod", top / "pod" / "ctr", top / "pod" / "ctr" / "nested"]
    cpus = (REAL / "cpuset" / "cpuset.cpus").read_text().strip()
    mems = (REAL / "cpuset" / "cpuset.mems").read_text().strip()
    try:
        for d in dirs:
            d.mkdir()
            (d / "cpuset.cpus").write_text(cpus)
            (d / "cpuset.mems").write_text(mems)
        yield top
    finally:
        for d in reversed(dirs):
            if d.exists():
                for pid in (d / "tasks").read_text().split():
                    (REAL / "cpuset" / "tasks").write_text(pid)
                d.rmdir()


def test_real_v1_shrink_with_a_nested_cgroup(real_tree: Path) -> None:
    ctr, nested = real_tree / "pod" / "ctr", real_tree / "pod" / "ctr" / "nested"
    every = read(ctr)
    last = CPUSet([max(every)])
    # the kernel refuses the naive order, as it refuses runc: the test can fail
    with pytest.raises(OSError) as refused:
        (ctr / "cpuset.cpus").write_text(str(last))
    assert refused.value.errno == 16  # EBUSY
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (nested / "tasks").write_text(str(sleeper.pid))
        w = CpusetWriter(REAL)
        w.apply(f"/{real_tree.name}/pod/ctr", last, ())
        assert read(ctr) == last and read(nested) == last and w.counts.nested == 1
        status = Path(f"/proc/{sleeper.pid}/status").read_text()
        allowed = next(line.split(":")[1] for line in status.splitlines() if line.startswith("Cpus_allowed_list"))
        assert CPUSet.parse(allowed) == last  # the process was moved off the other CPUs at once
        w.apply(f"/{real_tree.name}/pod/ctr", every, ())
        assert read(ctr) == every and read(nested) == last
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_read_only_cgroup_mount_turns_writes_off(tmp_path: Path) -> None:
    assert unwritable(tmp_path / "absent") == ""  # not there yet: try, fall back per container
    assert unwritable(tmp_path) == ""
    if not _real_v1():
        pytest.skip("needs root to mount")
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(ro)], check=True)
    try:
        assert "read-only" in unwritable(ro)
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_real_v1_load_balance_flag_and_a_removed_cgroup(real_tree: Path) -> None:
    if (REAL / "cpuset" / "cpuset.sched_load_balance").read_text().strip() != "1":
        pytest.skip("the top cpuset does not balance here: the flag is left alone (tested on a built tree)")
    ctr, nested = real_tree / "pod" / "ctr", real_tree / "pod" / "ctr" / "nested"
    nested.rmdir()
    every = read(ctr)
    last = CPUSet([max(every)])
    w = CpusetWriter(REAL)
    path = f"/{real_tree.name}/pod/ctr"
    w.apply(path, last, ())
    assert read(ctr) == last and w.counts.balance_cleared == 1
    assert (ctr / "cpuset.sched_load_balance").read_text().strip() == "0"
    assert (real_tree / "pod" / "cpuset.sched_load_balance").read_text().strip() == "1"
    w.apply(path, every, (), known=(last, ()))  # through the kept descriptor
    assert read(ctr) == every and len(w.files) == 1
    ctr.rmdir()  # the container went away while its file was open: the kernel answers ENODEV
    with pytest.raises(CgroupError, match="No such device"):
        w.apply(path, last, (), known=(every, ()))
    assert len(w.files) == 0
