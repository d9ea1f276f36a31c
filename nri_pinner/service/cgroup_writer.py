"""Write a running container's cpuset straight into its cgroup, before the NRI reply.

Why: containerd applies every `ContainerUpdate` of a reply with its own `runc update` (~13 ms),
one after another, holding its NRI lock; a pool change that touches N shared containers then
costs N × 13 ms for every event on the node. A `cpuset.cpus` write costs microseconds.

Rules (README "Pool changes"):
- cgroup v1: only the container's cpuset cgroup is written (the kubelet's pod cgroups keep every
  CPU). Nested cpuset cgroups a process in the container made must stay a subset of their parent
  (the kernel answers EBUSY otherwise, as it does to runc), so a shrink narrows them first, deepest
  first; a widen leaves them as their owner set them. A change that both adds and removes CPUs
  goes through the union, so no write ever asks for a set the kernel refuses.
- cgroup v2: children never constrain their parent; only the container's cgroup is written.
- cpuset.mems follows the same order, after cpuset.cpus is widened and before it is narrowed:
  both orders are legal, the kernel checks each file on its own.
Any failure raises `CgroupError`; the caller then sends the NRI update for that container.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..engine.cpuset import CPUSet, CPUSetError
from .cgroups import CgroupError, cpuset_dir

CPUS, MEMS = "cpuset.cpus", "cpuset.mems"


@dataclass
class WriteCounts:
    """What the writer did since start (exported in the status document and metrics)."""

    containers: int = 0  # containers whose cgroup was written
    writes: int = 0  # individual cpuset file writes
    nested: int = 0  # containers that had nested cpuset cgroups (narrowed first)
    failed: int = 0  # containers left to the NRI update


def _read(path: Path) -> CPUSet:
    try:
        with open(path, "rb") as f:
            return CPUSet.parse(f.read().decode())
    except OSError as exc:
        raise CgroupError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except CPUSetError as exc:
        raise CgroupError(f"{path}: {exc}") from exc


def _write(path: Path, value: CPUSet) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)  # O_TRUNC: cgroupfs ignores it, plain test files need it
    except OSError as exc:
        raise CgroupError(f"cannot open {path}: {exc.strerror or exc}") from exc
    try:
        os.write(fd, (str(value) or "\n").encode())  # an empty set is written as a newline
    except OSError as exc:
        raise CgroupError(f"cannot write {value} to {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def _nested(top: Path) -> list[Path]:
    """Every cgroup below `top`, parents before children (breadth first)."""
    out: list[Path] = []
    queue = [top]
    while queue:
        d = queue.pop(0)
        try:
            entries = [Path(e.path) for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        out.extend(entries)
        queue.extend(entries)
    return out


class CpusetWriter:
    def __init__(self, cgroup_root: str | Path) -> None:
        self.root = Path(cgroup_root)
        self.counts = WriteCounts()

    @property
    def v1(self) -> bool:
        """A cpuset hierarchy of its own (v1 or hybrid), as `cgroups.cpuset_dir` decides per call."""
        return (self.root / "cpuset").is_dir()

    def apply(self, cgroups_path: str, cpus: CPUSet, mems: str) -> None:
        """Make the container's cgroup hold `cpus` / `mems` ("" = leave mems alone)."""
        try:
            if not cgroups_path:
                raise CgroupError("the runtime reported no cgroups path")
            top = cpuset_dir(self.root, cgroups_path)
            wanted_mems = CPUSet.parse(mems) if mems else None
            self._apply(top, cpus, wanted_mems)
        except (CgroupError, CPUSetError) as exc:
            self.counts.failed += 1
            raise CgroupError(str(exc)) from exc
        self.counts.containers += 1

    def _apply(self, top: Path, cpus: CPUSet, mems: CPUSet | None) -> None:
        if not top.is_dir():
            raise CgroupError(f"no cgroup {top} (not started yet, or gone)")
        children = _nested(top) if self.v1 else []
        if children:
            self.counts.nested += 1
        for name, value in ((CPUS, cpus), (MEMS, mems)):
            if value is None:
                continue
            current = _read(top / name)
            if current == value:
                continue
            if not value.issubset(current):  # widen first (through the union when CPUs also go)
                self._put(top / name, current | value)
            if not current.issubset(value):  # then narrow: nested cgroups deepest first, the container last
                for child in reversed(children):
                    have = _read(child / name)
                    if not have.issubset(value):
                        self._put(child / name, (have & value) or value)
                self._put(top / name, value)

    def _put(self, path: Path, value: CPUSet) -> None:
        _write(path, value)
        self.counts.writes += 1
