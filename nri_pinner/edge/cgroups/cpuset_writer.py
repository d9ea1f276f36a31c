"""Write a running container's cpuset straight into its cgroup, before the NRI reply.

Why: containerd applies every `ContainerUpdate` of a reply with its own `runc update` (~13 ms),
one after another, holding its NRI lock; a pool change that touches N shared containers then
costs N × 13 ms for every event on the node. A `cpuset.cpus` write costs microseconds.

Rules (README "Pool changes"):
- cgroup v1: only the container's cpuset cgroup is written (the kubelet's pod cgroups keep every
  CPU). Nested cpuset cgroups a process in the container made must stay a subset of their parent
  (the kernel answers EBUSY otherwise, as it does to runc), so a shrink the kernel refuses narrows
  them first, deepest first, and tries again (they are looked for only then: nearly no container
  has any, and a look is a directory scan per container per pool change); a widen leaves them as
  their owner set them. A change that both adds and removes CPUs goes through the union.
- cgroup v2: children never constrain their parent; only the container's cgroup is written.
- cpuset.mems follows the same order, after cpuset.cpus is widened and before it is narrowed:
  both orders are legal, the kernel checks each file on its own.
Any failure raises `CgroupError`; the caller then sends the NRI update for that container.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from ...core.state import Mems
from ...engine.cpuset import CPUSet, CPUSetError
from .paths import CgroupError, cpuset_dir, relative_cgroup_path
from .systemd_units import SystemdUnits, scope_unit

CPUS, MEMS, BALANCE = "cpuset.cpus", "cpuset.mems", "cpuset.sched_load_balance"


@dataclass
class WriteCounts:
    """What the writer did since start (status document `health.cgroup_writes`, metric
    `nri_pinner_cgroup_writes_total{kind}`)."""

    containers: int = 0  # containers whose cgroup was written
    writes: int = 0  # individual cpuset file writes
    nested: int = 0  # containers that had nested cpuset cgroups (narrowed first)
    failed: int = 0  # containers left to the NRI update
    balance_cleared: int = 0  # v1 containers whose cpuset.sched_load_balance was cleared
    unit_calls: int = 0  # systemd scopes told the cpuset written (SetUnitProperties answered), pod slices no quota
    unit_failed: int = 0  # ... refused, unanswered or the bus down: left to the NRI update (a slice: retried)
    pod_quotas: int = 0  # pod cgroups whose CFS quota was removed (quota_writer.py)
    pod_quotas_restored: int = 0  # ... put back (a pod demoted for pod-level resources)
    pod_quota_failed: int = 0  # ... not written, either way (retried at the next check)
    qos_slices: int = 0  # QoS slice cpusets written (reconcile.systemd_pool_on_qos_slices, qos_slices.py)
    qos_slice_failed: int = 0  # ... not written: the containers below it are written one by one


def _read_text(path: str) -> str:
    """One cgroup file's text: plain os calls (no buffered file object: Synchronize reads thousands)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.read(fd, 1 << 16)  # a cpuset list of 8192 CPUs fits
        finally:
            os.close(fd)
    except OSError as exc:
        raise CgroupError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return data.decode().strip()
    except UnicodeDecodeError as exc:
        raise CgroupError(f"cannot read {path}: not text") from exc


def _parse(path: str, text: str) -> CPUSet:
    try:
        return CPUSet.parse(text)
    except CPUSetError as exc:
        raise CgroupError(f"{path}: {exc}") from exc


class OpenFiles:
    """Write descriptors of containers' own cpuset files, kept open between pool changes.

    A write through an open descriptor skips the path walk, the open and the close: a third of what
    a cgroupfs write costs (`benchmarks/bench_cgroup_write.py`). The oldest descriptor is closed
    past `limit`, and `retain` closes those of containers that are gone (a removed cgroup's file
    answers ENODEV). Used by one pass at a time (the core keeps one in flight), so no descriptor is
    closed while another thread writes through it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._fds: dict[str, int] = {}  # file path -> descriptor, oldest first

    def __len__(self) -> int:
        return len(self._fds)

    def write(self, path: str, text: str, keep: bool = True) -> None:
        """Write `text` as the file's whole content (cgroupfs ignores the truncate, plain test files
        need it); `keep=False` opens and closes (nested cgroups: rare)."""
        data = (text or "\n").encode()  # an empty set is written as a newline
        fd = self._fds.get(path, -1)
        if fd < 0:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            except OSError as exc:
                raise CgroupError(f"cannot open {path}: {exc.strerror or exc}") from exc
            if keep:
                self._fds[path] = fd
                if len(self._fds) > self.limit:
                    os.close(self._fds.pop(next(iter(self._fds))))
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        except OSError as exc:
            keep = False  # closed below: the next write opens afresh (a recreated or refusing cgroup)
            self._fds.pop(path, None)
            raise CgroupError(f"cannot write {text} to {path}: {exc.strerror or exc}") from exc
        finally:
            if not keep:
                os.close(fd)

    def retain(self, tops: set[str]) -> None:
        """Close the descriptors of files outside the directories `tops`."""
        for path in [p for p in self._fds if p.rpartition("/")[0] not in tops]:
            os.close(self._fds.pop(path))

    def close(self) -> None:
        self.retain(set())


def open_files_limit() -> int:
    """A quarter of the soft descriptor limit, 64 … 4096 (the checkpoint, sockets and sysfs reads
    need the rest)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 4096 if soft == resource.RLIM_INFINITY else max(64, min(4096, soft // 4))


def _nested(top: str) -> list[str]:
    """Every cgroup below `top`, parents before children (breadth first)."""
    out: list[str] = []
    queue = [top]
    while queue:
        d = queue.pop(0)
        try:
            entries = [e.path for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        out.extend(entries)
        queue.extend(entries)
    return out


def unwritable(cgroup_root: str | Path) -> str:
    """Why cpusets under `cgroup_root` cannot be written ("" = they can, or the tree is not there yet):
    a read-only mount (systemd `ProtectControlGroups=yes`, a read-only volume) fails every write, so
    the service then keeps every pool change in its replies instead.

    Asked by opening the top cgroup's `cgroup.procs` for writing (nothing is written), as a write
    would: `access(W_OK)` answers EACCES for root with an empty capability bounding set (the
    packaged unit) while the open succeeds — it judged the real sandbox wrongly."""
    base = cpuset_dir(cgroup_root, "")
    try:
        if os.statvfs(base).f_flag & os.ST_RDONLY:
            return f"{base} is mounted read-only"
    except OSError:
        return ""
    probe = base / "cgroup.procs"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CLOEXEC))
    except FileNotFoundError:
        return ""  # not a cgroup tree (yet): try, fall back per container
    except OSError as exc:
        return f"{probe} cannot be opened for writing by this process: {exc.strerror or exc}"
    return ""


class CpusetWriter:
    """Per event it costs, for each container whose cpuset changes, one write per file that differs
    (a read of each first when the caller does not know what the cgroup holds), through descriptors
    kept open (`OpenFiles`); see bench_cgroup_write.py."""

    def __init__(self, cgroup_root: str | Path, skip_v1_rebuilds: bool = True,
                 units: SystemdUnits | None = None) -> None:
        self.root = Path(cgroup_root)
        self.units = units  # systemd, told what is written into scopes (systemd driver)
        self.counts = WriteCounts()
        self.files = OpenFiles(open_files_limit())
        self.skip_v1_rebuilds = skip_v1_rebuilds
        self._balance_done: set[str] = set()  # v1 container directories whose load-balance flag was handled
        self._dirs: dict[str, str] = {}  # cgroups path -> the container's cpuset directory
        self._base: str | None = None  # <root>/cpuset (v1, hybrid) or <root> (v2); forgotten on a failure
        self._v1: bool | None = None
        self._texts: dict[tuple[CPUSet, str], str] = {}
        self._parsed: dict[str, CPUSet] = {}  # cpuset texts read back: a handful of distinct values
        self._node_sets: dict[Mems, CPUSet] = {}

    @property
    def v1(self) -> bool:
        """A cpuset hierarchy of its own (v1 or hybrid), as `cgroups.cpuset_dir` decides (asked once,
        with the base directory; a failed write forgets both)."""
        if self._v1 is None:
            self._v1 = (self.root / "cpuset").is_dir()
        return self._v1

    def _base_dir(self) -> str:
        if self._base is None:  # the same rule as cgroups.cpuset_dir, decided once
            self._base = str(cpuset_dir(self.root, ""))
        return self._base

    def _dir(self, cgroups_path: str) -> str:
        d = self._dirs.get(cgroups_path)
        if d is None:
            if len(self._dirs) >= 65536:
                self._dirs.clear()
            d = self._dirs[cgroups_path] = f"{self._base_dir()}/{relative_cgroup_path(cgroups_path).strip('/')}"
        return d

    def _text(self, cpus: CPUSet, sep: str = "") -> str:
        """`cpus` as cpuset text (sep "": ranges) or as a list joined by `sep` (mems "0,1"), cached."""
        text = self._texts.get((cpus, sep))
        if text is None:
            if len(self._texts) >= 256:
                self._texts.clear()
            text = self._texts[(cpus, sep)] = sep.join(map(str, cpus)) if sep else str(cpus)
        return text

    def read(self, cgroups_path: str) -> tuple[CPUSet, Mems]:
        """The container's cgroup cpuset.cpus and cpuset.mems."""
        top = self._dir(cgroups_path)
        path = f"{top}/{CPUS}"
        try:  # the same few texts on every shared container: parsed once (`_parse` caches any list)
            cpus = self._parse(_read_text(path))
        except CPUSetError as exc:
            raise CgroupError(f"{path}: {exc}") from exc
        return cpus, tuple(self._parse(_read_text(f"{top}/{MEMS}")))

    def apply(self, cgroups_path: str, cpus: CPUSet, mems: Mems,
              known: tuple[CPUSet | None, Mems] | None = None) -> None:
        """Make the container's cgroup hold `cpus` / `mems` (() = leave mems alone).

        `known` is what this writer last put there (the core's record of what it told): those files are not read
        back, which halves the syscalls of a pool change. Drift behind our back is the repair
        timer's business, and it calls without `known`.
        """
        try:
            if not cgroups_path:
                raise CgroupError("the runtime reported no cgroups path")
            top = self._dir(cgroups_path)
            wanted_mems = self._nodes(mems) if mems else None
            known_cpus, known_mems = known if known is not None else (None, ())
            self._apply(top, cpus, wanted_mems, known_cpus, self._nodes(known_mems) if known_mems else None)
        except (CgroupError, CPUSetError) as exc:
            self.counts.failed += 1
            self._dirs.pop(cgroups_path, None)  # the layout may have changed (v1 <-> v2 test trees)
            self._base = self._v1 = None
            raise CgroupError(str(exc)) from exc
        self.counts.containers += 1

    def _parse(self, text: str) -> CPUSet:
        parsed = self._parsed.get(text)
        if parsed is None:
            if len(self._parsed) >= 256:
                self._parsed.clear()
            parsed = self._parsed[text] = CPUSet.parse(text)
        return parsed

    def _nodes(self, mems: Mems) -> CPUSet:
        """cpuset.mems node ids as a set (the same few on every container: built once)."""
        nodes = self._node_sets.get(mems)
        if nodes is None:
            if len(self._node_sets) >= 256:
                self._node_sets.clear()
            nodes = self._node_sets[mems] = CPUSet(mems)
        return nodes

    def apply_slice(self, path: str, cpus: CPUSet, known: CPUSet | None) -> None:
        """A QoS slice's `cpuset.cpus` (`path` below the hierarchy's root; qos_slices.py), its mems left
        alone; `known`: what it holds (None: read it). Opened and closed each time: a pass writes two."""
        try:
            self._apply(self._dir(path), cpus, None, known, None, keep=False)
        except (CgroupError, CPUSetError) as exc:
            self.counts.qos_slice_failed += 1
            self._dirs.pop(path, None)
            self._base = self._v1 = None
            raise CgroupError(str(exc)) from exc
        self.counts.qos_slices += 1

    def _apply(self, top: str, cpus: CPUSet, mems: CPUSet | None, known_cpus: CPUSet | None,
               known_mems: CPUSet | None, keep: bool = True) -> None:
        children: list[str] | None = None  # looked up once, only when something narrows
        for name, value, known in ((CPUS, cpus, known_cpus), (MEMS, mems, known_mems)):
            if value is None:
                continue
            path = f"{top}/{name}"
            if known is not None:
                current = known
            else:
                text = _read_text(path)
                if text == self._text(value):
                    continue
                current = _parse(path, text)
            if current == value:
                continue
            if self.skip_v1_rebuilds and self.v1:
                self._skip_rebuilds(top)
            if not value.issubset(current):  # widen first (through the union when CPUs also go)
                self._put(path, current | value, keep)
            if not current.issubset(value):  # then narrow: nested cgroups deepest first, the container last
                if children is None:
                    try:  # almost no container nests cpusets: try the container alone, look only on refusal
                        self._put(path, value, keep)
                        continue
                    except CgroupError:
                        children = _nested(top) if self.v1 else []
                        self.counts.nested += bool(children)
                        if not children:
                            raise
                for child in reversed(children):
                    child_path = f"{child}/{name}"
                    have = _parse(child_path, _read_text(child_path))
                    if not have.issubset(value):
                        self._put(child_path, (have & value) or value, keep=False)
                self._put(path, value, keep)

    def _put(self, path: str, value: CPUSet, keep: bool = True) -> None:
        self.files.write(path, self._text(value), keep)
        self.counts.writes += 1

    def _skip_rebuilds(self, top: str) -> None:
        """cgroup v1: clear the container's `cpuset.sched_load_balance` before its first write. With
        the flag set, every write to the container's cpuset rebuilds the scheduler domains: two
        thirds of a write's cost below the kubelet's pod cgroups (bench_cgroup_write.py
        --balance-flag). Clearing it changes no scheduling while the top cpuset balances — the
        kernel then makes one domain of all CPUs whatever the children say (kernel docs,
        cgroup-v1/cpusets.rst 1.7) — so it is done only then, checked at each container's first
        write. A missing or refused flag file only leaves the writes slower."""
        if top in self._balance_done:
            return
        if len(self._balance_done) >= 65536:
            self._balance_done.clear()
        self._balance_done.add(top)
        try:
            if _read_text(f"{self._base_dir()}/{BALANCE}") != "1":
                return
            self.files.write(f"{top}/{BALANCE}", "0", keep=False)
            self.counts.balance_cleared += 1
        except CgroupError:
            pass

    def tell_systemd(self, items: Iterable[tuple[str, CPUSet, Mems]],
                     slices: Iterable[tuple[str, CPUSet]] = ()) -> dict[str, str]:
        """Before writing: have systemd hold (cgroups path, cpus, mems) for each container that runs in
        a systemd scope, so its re-applications write the same (systemd_units.py). Returns
        {cgroups path: why} for those it could not confirm; containers outside systemd units are
        not asked about. `slices`: (slice unit, cpus) told `AllowedCPUs` alone (qos_slices.py), their
        failures keyed by the unit. All calls of one pass go out together."""
        if self.units is None:
            return {}
        by_unit: dict[str, str] = {}
        calls: list[tuple[str, CPUSet, CPUSet | None]] = []
        for slice_unit, cpus in slices:
            by_unit[slice_unit] = slice_unit
            calls.append((slice_unit, cpus, None))
        for path, cpus, mems in items:
            unit = scope_unit(path)
            if unit is not None:
                by_unit[unit] = path
                calls.append((unit, cpus, self._nodes(mems) if mems else None))
        failed = self.units.agree(calls)
        self.counts.unit_failed += len(failed)
        self.counts.unit_calls += len(calls) - len(failed)
        return {by_unit[unit]: why for unit, why in failed.items()}

    def stats(self) -> dict[str, int]:
        """The counters and the descriptors open now (status document, metrics)."""
        return {**asdict(self.counts), "open_files": len(self.files)}

    def retain(self, cgroups_paths: Iterable[str]) -> None:
        """Forget every container but these (a pass calls it when containers went away)."""
        tops = {self._dir(p) for p in cgroups_paths}
        self.files.retain(tops)
        self._balance_done &= tops

    def close(self) -> None:
        self.files.close()
        if self.units is not None:
            self.units.close()
