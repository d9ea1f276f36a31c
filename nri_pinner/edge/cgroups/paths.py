"""Where a container's cpuset lives in the cgroup tree, and reading it back for drift checks.

Handles both cgroup drivers' spellings of NRI's `linux.cgroups_path`:
cgroupfs `/kubepods/burstable/pod<uid>/<id>` and systemd `<slice>:<prefix>:<name>`
(e.g. `kubepods-burstable-pod<uid>.slice:cri-containerd:<id>`), and both cgroup v1
(`<root>/cpuset/<path>`) and the unified v2 hierarchy (`<root>/<path>`).
"""

from __future__ import annotations

from pathlib import Path

from ...engine.cpuset import CPUSet, CPUSetError


class CgroupError(OSError):
    """The container's cpuset cannot be located or read."""


def expand_systemd_slice(slice_name: str) -> str:
    """`a-b-c.slice` → `/a.slice/a-b.slice/a-b-c.slice` (systemd's slice nesting rule)."""
    if slice_name in ("", "-.slice"):
        return "/"
    stem = slice_name.removesuffix(".slice")
    parts = stem.split("-")
    return "/" + "/".join("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


def relative_cgroup_path(cgroups_path: str) -> str:
    """NRI cgroups_path (either driver's form) → path below a hierarchy's mount point."""
    if ":" in cgroups_path and not cgroups_path.startswith("/"):
        slice_name, prefix, name = ([*cgroups_path.split(":"), "", ""])[:3]
        scope = f"{prefix}-{name}.scope" if prefix else f"{name}.scope"
        return expand_systemd_slice(slice_name).rstrip("/") + "/" + scope
    return "/" + cgroups_path.strip("/")


def cpuset_dir(cgroup_root: str | Path, cgroups_path: str) -> Path:
    root = Path(cgroup_root)
    rel = relative_cgroup_path(cgroups_path).lstrip("/")
    v1 = root / "cpuset" / rel
    if (root / "cpuset").is_dir():
        return v1
    return root / rel


def read_cpus(cgroup_root: str | Path, cgroups_path: str) -> CPUSet:
    path = cpuset_dir(cgroup_root, cgroups_path) / "cpuset.cpus"
    try:
        text = path.read_text()
    except OSError as exc:
        raise CgroupError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return CPUSet.parse(text)
    except CPUSetError as exc:
        raise CgroupError(f"{path}: {exc}") from exc


def read_cpuset(cgroup_root: str | Path, cgroups_path: str) -> tuple[CPUSet, tuple[int, ...]]:
    """The container's cgroup cpuset.cpus and cpuset.mems (node ids), as the kernel holds them."""
    cpus = read_cpus(cgroup_root, cgroups_path)
    path = cpuset_dir(cgroup_root, cgroups_path) / "cpuset.mems"
    try:
        mems = CPUSet.parse(path.read_text())
    except (OSError, CPUSetError) as exc:
        raise CgroupError(f"cannot read {path}: {exc}") from exc
    return cpus, tuple(mems)
