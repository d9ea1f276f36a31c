"""Leave pods' cgroups without a CFS quota, in the cgroup passes (core/quotas.py decides which pods),
and put the kubelet's back into those of pods demoted for pod-level resources.

What the kubelet writes into a pod cgroup created without a quota (its DisableCPUQuotaWithExclusiveCPUs;
cm/helpers_linux.go ResourceConfigForPod: cpu quota -1), through runc's cgroup managers: cgroup v1
`cpu.cfs_quota_us` "-1", cgroup v2 `cpu.max` "max <period>" (fs2/cpu.go setCpu: "max" for a quota
<= 0, the period kept). The same is written here, into the cpu controller's hierarchy: v1 `<root>/cpu`
(or `cpu,cpuacct` without the `cpu` link), v2 `<root>` itself. The kernel takes it whatever the
children hold: no limit is never below a child's.

Read first: a cgroup that holds no quota is not written, so the re-check (every reconcile period)
costs one read per pod with exclusive CPUs, and a write only where a kubelet resize put a quota back.
Under the systemd driver the pod slice is told first (CPUQuotaPerSecUSec=infinity,
systemd_units.py), as container scopes are told their cpusets: systemd's re-applications of the
slice then write no quota either. A slice is told again only when its cgroup holds a quota (the
kubelet's resize tells systemd its new one first). A refused or unanswered call is reported
(`untold`): the direct write stands until systemd re-applies the slice, and the core tries again at
its next check.

Putting a quota back (an item with ``quota``, core/quotas.py): v1 `cpu.cfs_quota_us` "<quota>", v2
`cpu.max` "<quota> <period>" (runc fs/cpu.go, fs2/cpu.go setCpu for a quota > 0; the period is the
sandbox's, the kubelet's cpuCFSQuotaPeriod, which the cgroup holds already), written only when the
cgroup holds something else; under the systemd driver the slice is told its CPUQuotaPerSecUSec first
(`quota_call`), each time, as the kubelet's libcontainer does when it sets a pod's quota. Counted
apart (`pod_quotas_restored`); a failure counts as any other (`pod_quota_failed`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import structlog

from ...core.effects import PodQuotaItem
from ...core.events import PodQuotaResult
from .cpuset_writer import WriteCounts
from .paths import CgroupError, expand_systemd_slice
from .systemd_units import SystemdUnits, no_quota_call, quota_call

log = structlog.get_logger("nri_pinner.service")

V1_QUOTA, V2_MAX = "cpu.cfs_quota_us", "cpu.max"


def is_slice(cgroup: str) -> bool:
    """A pod cgroup in the systemd driver's spelling (a slice unit's name, not a path)."""
    return not cgroup.startswith("/") and cgroup.endswith(".slice")


def _read(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.read(fd, 256).decode(errors="replace").strip()
        finally:
            os.close(fd)
    except OSError as exc:
        raise CgroupError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _write(path: str, text: str) -> None:
    """The file's whole content (cgroupfs ignores the truncate; plain test files need it)."""
    data = text.encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
    except OSError as exc:
        raise CgroupError(f"cannot write {text!r} to {path}: {exc.strerror or exc}") from exc


class PodQuotas:
    """Used by the pass threads, one pass at a time (the core keeps one in flight): no lock."""

    def __init__(self, cgroup_root: str | Path, units: SystemdUnits | None, counts: WriteCounts) -> None:
        self.root = Path(cgroup_root)
        self.units = units
        self.counts = counts  # the cpuset writer's: status `health.cgroup_writes`, the metric
        self._base: tuple[Path, bool] | None = None  # (cpu hierarchy, v1); forgotten on a failure
        self._told: set[str] = set()  # pod slices systemd confirmed: a re-check of one without a quota only reads
        self._told_no_bus = False

    def write(self, items: Sequence[PodQuotaItem]) -> list[PodQuotaResult]:
        """Each pod cgroup without a quota, or with the item's ``quota`` back: every one read; systemd
        told (all calls together) about the slices that hold another quota or were never told, then
        those that hold another quota written."""
        results: dict[str, PodQuotaResult] = {}
        act: list[tuple[PodQuotaItem, str, str, str]] = []  # (item, file, what it holds, what to write)
        for i in items:
            try:
                path, text, unlimited = self._read(i.cgroup)
            except CgroupError as exc:
                results[i.pod_key] = self._failed(i, exc)
                continue
            if i.quota is not None:  # put back: systemd is told each time (one pass per demotion)
                wanted = self._quota_text(path, i.quota, i.period)
                act.append((i, path, text, "" if text.split() == wanted.split() else wanted))
            elif unlimited and (not is_slice(i.cgroup) or i.cgroup in self._told):
                results[i.pod_key] = PodQuotaResult(i.pod_key, i.name)  # the re-check's usual answer: a read
            else:
                act.append((i, path, text, "" if unlimited else self._unlimited_text(path, text)))
        untold = self._tell_systemd([i for i, _, _, _ in act])
        for i, path, text, wanted in act:
            try:
                if wanted:
                    _write(path, wanted)
            except CgroupError as exc:
                results[i.pod_key] = self._failed(i, exc)
                continue
            if i.quota is None:
                self.counts.pod_quotas += bool(wanted)
            else:
                self.counts.pod_quotas_restored += bool(wanted)
            results[i.pod_key] = PodQuotaResult(i.pod_key, i.name, before=text if wanted else "",
                                                untold=untold.get(i.pod_key, ""), quota=i.quota)
        return [results[i.pod_key] for i in items]

    def directory(self, cgroup: str) -> tuple[Path, bool]:
        """The pod cgroup's directory in the cpu controller's hierarchy, and whether that is v1."""
        if self._base is None:
            v1 = next((self.root / n for n in ("cpu", "cpu,cpuacct") if (self.root / n).is_dir()), None)
            self._base = (v1, True) if v1 is not None else (self.root, False)
        base, v1_layout = self._base
        rel = expand_systemd_slice(cgroup) if is_slice(cgroup) else cgroup
        return base / rel.strip("/"), v1_layout

    def _read(self, cgroup: str) -> tuple[str, str, bool]:
        """(the quota file, what it holds, whether that is no quota)."""
        d, v1 = self.directory(cgroup)
        path = str(d / (V1_QUOTA if v1 else V2_MAX))
        text = _read(path)
        if v1:
            try:
                return path, text, int(text) < 0
            except ValueError:
                raise CgroupError(f"{path}: not a quota: {text!r}") from None
        if not text.split():
            raise CgroupError(f"{path}: empty")
        return path, text, text.split()[0] == "max"

    @staticmethod
    def _unlimited_text(path: str, text: str) -> str:
        """No quota: v1 "-1"; v2 "max <period>", the period it holds kept."""
        return "-1" if path.endswith(V1_QUOTA) else " ".join(["max", *text.split()[1:2]])

    @staticmethod
    def _quota_text(path: str, quota: int, period: int) -> str:
        """A quota put back: v1 "<quota>" (the period file is the kubelet's, never changed here); v2
        "<quota> <period>"."""
        return str(quota) if path.endswith(V1_QUOTA) else f"{quota} {period}"

    def _failed(self, i: PodQuotaItem, exc: CgroupError) -> PodQuotaResult:
        self.counts.pod_quota_failed += 1
        self._base = None  # the layout may have changed (test trees)
        return PodQuotaResult(i.pod_key, i.name, error=str(exc), quota=i.quota)

    def _tell_systemd(self, items: Sequence[PodQuotaItem]) -> dict[str, str]:
        """{pod key: why} for the slices systemd did not confirm."""
        slices = [i for i in items if is_slice(i.cgroup)]
        if not slices:
            return {}
        if self.units is None:
            if not self._told_no_bus:
                self._told_no_bus = True
                log.warning("pod slices' CFS quota written by a direct write only: reconcile.systemd_bus is "
                            "off, so systemd puts its own back whenever it re-applies a slice's settings")
            return {}
        failed = self.units.call([(i.cgroup, no_quota_call(i.cgroup) if i.quota is None
                                   else quota_call(i.cgroup, i.quota, i.period)) for i in slices])
        self.counts.unit_failed += len(failed)
        self.counts.unit_calls += len(slices) - len(failed)
        if len(self._told) >= 65536:
            self._told.clear()
        for i in slices:
            if i.quota is not None:
                self._told.discard(i.cgroup)  # holds a quota now: a later removal tells systemd again
            elif i.cgroup not in failed:
                self._told.add(i.cgroup)
        return {i.pod_key: failed[i.cgroup] for i in slices if i.cgroup in failed}
