"""No CFS quota on a container that holds exclusive CPUs, nor on its pod's cgroup: the kubelet's
DisableCPUQuotaWithExclusiveCPUs (beta, on by default since v1.33, kubernetes#127525), which the
kubelet applies only to containers its own CPU manager pinned — none under `cpuManagerPolicy: none`
(README "Configuration reference": `cpu_manager.disable_cpu_quota_with_exclusive_cpus`).

The kubelet (the release lines are cited in the README):
- container: `CpuQuota = -1` when it holds exclusive CPUs, at its create and in every later update
  (kuberuntime_container_linux.go generateLinuxContainerResources). Here the create's adjustment and
  every update reply of an exclusive container set -1 (`container_quota`); a container that is not
  exclusive keeps the kubelet's quota: an update leaves the request's value, and a resize to shared
  carries the kubelet's limit x period. Only a container with a quota: with the kubelet's
  `cpuCFSQuota: false` it sends none and there is nothing to remove.
- pod cgroup: created without a quota when any of its containers holds exclusive CPUs
  (pod_container_manager_linux.go EnsureExists → helpers_linux.go ResourceConfigForPod). The kubelet
  writes the pod cgroup once, when it creates it; after that only an in-place resize writes its quota
  again (kuberuntime_manager.go doPodResizeAction), before the containers' updates when the new quota
  is larger than what the cgroup holds — always, once it holds -1 — and after them otherwise. Its
  QoS updates write only the QoS cgroups. So here a cgroup pass (passes.py; written at the edge by
  quota_writer.py, never on a reply's path) removes the quota of every pod with exclusive CPUs that is
  not known to be unlimited (`due`); a kubelet resize in the pod (an UpdateContainer with shares or
  quota, an UpdatePodSandbox) makes it due again at once and once more RECHECK_SECONDS later (the
  after-the-containers order), and the re-check timer (`reconcile.period_seconds`) verifies every
  pod's (a read; a write only where a quota came back). Under the systemd driver the pod slice is told
  CPUQuotaPerSecUSec=infinity first (systemd_units.py), so systemd's re-applications keep it.
A pod's quota is put back here in one case only. A pod loses its exclusive CPUs through a resize to
shared, which writes the kubelet's quota into the pod cgroup itself — or through a demotion: a pod
with pod-level resources whose first container looked like an ordinary Guaranteed pod's was pinned
(its quota removed), and a later sibling showed it (pod_level.py `demote`). The kubelet never pinned
that pod, so it keeps the pod cgroup's quota = the pod's CPU limit x period (ResourceConfigForPod,
enforceCPULimits true) and each container's = its own limit x period; nothing of the kubelet's writes
them again. So at that create (`pod_level`) a pod whose quota a pass removed is given back the
sandbox's quota and period (NRI `linux.pod_resources`, what the kubelet computed the pod cgroup's
from: pod_level.pod_cpu_quota; none without a CPU limit, then it is left and logged) by the next pass
(`due`: an item with ``quota``; quota_writer.py writes v1 `cpu.cfs_quota_us` <quota>, v2 `cpu.max`
"<quota> <period>", a systemd slice told its CPUQuotaPerSecUSec first), retried at the check when it
fails, dropped when a kubelet resize in the pod writes the pod's new quota first. The demoted
containers get their own quota back in their NRI updates (reply_updates.py `quota_back`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from .effects import ArmTimer, PodQuotaItem
from .events import PodQuotaResult
from .pod_level import pod_cpu_quota
from .reply_updates import UNLIMITED, update_quota
from .state import ContainerRecord

if TYPE_CHECKING:
    from .context import CoreContext

log = structlog.get_logger("nri_pinner.service")

CHECK_TIMER = "pod-quota-check"  # every reconcile.period_seconds while a pod's quota is removed
RESIZE_TIMER = "pod-quota-resize"  # once, RECHECK_SECONDS after a kubelet resize in a pod
RECHECK_SECONDS = 1.0
# the kubelet's pod cgroup names: cgroupfs "pod<uid>" (cm.GetPodCgroupNameSuffix), systemd
# "kubepods[-burstable|-besteffort]-pod<uid, '-' as '_'>.slice"; nothing else is ever written
_POD_DIR = re.compile(r"pod[^/:]+")
_POD_SLICE = re.compile(r"kubepods(?:-burstable|-besteffort)?-pod[^/:]+\.slice")


def pod_cgroup(cgroups_path: str) -> str | None:
    """The pod's cgroup from one of its containers' NRI `cgroups_path`, in the same spelling: cgroupfs
    `/kubepods/burstable/pod<uid>` (the parent directory), systemd `kubepods-burstable-pod<uid>.slice`
    (the slice of `<slice>:<prefix>:<name>`). None unless it is named as the kubelet names pods'."""
    if cgroups_path.startswith("/"):
        parent = cgroups_path.rstrip("/").rpartition("/")[0]
        if any(part in (".", "..") for part in parent.split("/")):
            return None  # never a path that leaves the hierarchy
        return parent if "kubepods" in parent and _POD_DIR.fullmatch(parent.rpartition("/")[2]) else None
    if cgroups_path.count(":") == 2:
        slice_name = cgroups_path.split(":")[0]
        return slice_name if _POD_SLICE.fullmatch(slice_name) else None
    return None


class QuotaBook:
    """Which pods' cgroups hold no quota (as far as the passes saw), and when to look again."""

    def __init__(self, core: CoreContext) -> None:
        self.core = core
        self.enabled = core.settings.cpu_manager.disable_cpu_quota_with_exclusive_cpus
        self.period = core.settings.reconcile.period_seconds
        self.removed: set[str] = set()  # pod keys whose cgroup holds no quota
        self.failed: dict[str, str] = {}  # pod key -> why its last write failed (retried at the re-check)
        self.sent: set[str] = set()  # in the pass in flight
        self.redo: set[str] = set()  # ... and resized by the kubelet meanwhile: its result is stale
        self.recheck: set[str] = set()  # resized: due again when RESIZE_TIMER fires
        self.back: dict[str, tuple[int, int]] = {}  # pod key -> (quota, period) to put back (module doc)
        self.checking = False  # CHECK_TIMER armed
        self._noted = False  # cgroup writes off: said once

    # -- containers: what the NRI reply says -------------------------------------------------------
    def container_quota(self, t: ContainerRecord) -> int | None:
        """The CPU quota the create's adjustment or an update of `t` sets: -1 while it holds exclusive
        CPUs and has a quota; None leaves the kubelet's."""
        quota = update_quota(self.enabled, self.core.node.state, t)
        if quota == UNLIMITED and not self.core.node.cgroup_writes and not self._noted:
            self._noted = True
            log.warning("pods' CFS quota not removed: cgroup writes are off (reconcile.cgroup_writes, or a "
                        "read-only cgroup fs); exclusive containers still run without their own quota")
        return quota

    # -- pods: what a pass writes ---------------------------------------------------------------------
    def pod_level(self, pod_key: str, pod: Any) -> None:
        """A create showed (or knew) that this pod uses pod-level resources: none of its containers holds
        exclusive CPUs now (pod_level.settle demoted them). A pod whose quota a pass removed (or is
        removing) gets the sandbox's back at the next pass (module doc)."""
        if pod_key in self.back or not (pod_key in self.removed or pod_key in self.failed or pod_key in self.sent):
            return  # never taken up (its cgroup holds the kubelet's quota), or already being put back
        self.removed.discard(pod_key)
        self.failed.pop(pod_key, None)
        if pod_key in self.sent:
            self.redo.add(pod_key)  # the removal in flight: its result is stale
        quota = pod_cpu_quota(pod)
        name = f"{pod.namespace}/{pod.name}"
        if quota is None:
            log.info("pod CFS quota not put back: its sandbox has no CPU quota (the kubelet's cpuCFSQuota: "
                     "false, or no CPU limit), so the kubelet's pod cgroup has none either", pod=name)
            return
        self.back[pod_key] = quota
        log.info("pod uses pod-level resources: its cgroup's CFS quota is put back at the next pass", pod=name,
                 quota=quota[0], period=quota[1])

    def due(self) -> tuple[PodQuotaItem, ...]:
        """The pods a pass dispatched now writes: those with exclusive CPUs (a container of theirs
        holds some, running or exited) whose cgroup is not known to hold no quota, and those whose
        quota is to be put back (`back`; one that failed waits for the check)."""
        if not self.enabled:
            return ()
        node = self.core.node
        exclusive = {a.pod for a in node.state.assignments.values() if a.exclusive}
        items: list[PodQuotaItem] = []
        wanted: set[str] = set()
        for pod_key in exclusive:
            found = self._pod_cgroup(pod_key)
            if found is None:
                continue  # not a kubelet pod (no pod cgroup of its own), or not tracked
            wanted.add(pod_key)
            self.back.pop(pod_key, None)  # exclusive again: no quota after all
            if pod_key not in self.removed and pod_key not in self.failed:
                items.append(PodQuotaItem(pod_key, found[0], found[1]))
        for pod_key, (quota, period) in list(self.back.items()):
            found = self._pod_cgroup(pod_key)
            if found is None:
                del self.back[pod_key]  # the pod is gone
            elif pod_key not in self.failed:
                items.append(PodQuotaItem(pod_key, found[0], found[1], quota, period))
        self.removed &= wanted
        for gone in [k for k in self.failed if k not in wanted and k not in self.back]:
            del self.failed[gone]
        self.sent = {i.pod_key for i in items}
        self.redo.clear()
        return tuple(items)

    def _pod_cgroup(self, pod_key: str) -> tuple[str, str] | None:
        members = self.core.node.containers.by_pod.get(pod_key)
        return _cgroup_of(members.values()) if members else None

    def written(self, results: Sequence[PodQuotaResult]) -> None:
        """A pass is back: which pods now hold no quota, which failed (retried at the re-check)."""
        for r in results:
            self.sent.discard(r.pod_key)
            why = r.error or r.untold
            if r.pod_key in self.redo:
                continue  # the kubelet wrote it again while the pass ran: the next pass looks again
            if r.quota is not None:
                self._put_back(r, why)
                continue
            if why:
                if self.failed.get(r.pod_key) is None:
                    log.warning("pod CFS quota not removed; retried at the next check", pod=r.name, error=why)
                self.failed[r.pod_key] = why
                continue
            self.removed.add(r.pod_key)
            if r.before:
                log.info("pod CFS quota removed", pod=r.name, had=r.before)
        self.redo.clear()
        self._arm_check()

    def _put_back(self, r: PodQuotaResult, why: str) -> None:
        if r.pod_key not in self.back:
            return  # dropped meanwhile (exclusive again, or the kubelet resized the pod)
        if why:
            if self.failed.get(r.pod_key) is None:
                log.warning("pod CFS quota not put back; retried at the next check", pod=r.name, error=why)
            self.failed[r.pod_key] = why
            return
        del self.back[r.pod_key]
        self.failed.pop(r.pod_key, None)
        log.info("pod CFS quota put back: the kubelet's for a pod it never pinned", pod=r.name, quota=r.quota,
                 had=r.before or None)

    # -- what makes a pod due again -------------------------------------------------------------------
    def kubelet_resized(self, pod_key: str) -> None:
        """The kubelet's resize in this pod wrote the pod cgroup's quota (doPodResizeAction). Only a pod
        a pass took up matters: one that is due is written by the pass already asked for. A pod whose
        quota was to be put back holds the kubelet's new one now: left to the kubelet."""
        if self.back.pop(pod_key, None) is not None:
            self.failed.pop(pod_key, None)
            if pod_key in self.sent:
                self.redo.add(pod_key)
            return
        if pod_key not in self.removed and pod_key not in self.failed and pod_key not in self.sent:
            return
        self._again((pod_key,))
        self.recheck.add(pod_key)
        self.core.emit(ArmTimer(RESIZE_TIMER, RECHECK_SECONDS))

    def timer(self, name: str) -> None:
        if name == RESIZE_TIMER:
            pods, self.recheck = self.recheck, set()
            self._again(pods)
        elif name == CHECK_TIMER:
            self.checking = False
            self._again(set(self.removed) | set(self.failed))

    def reset(self) -> None:
        """A (re)connect: what each pod cgroup holds is not known any more (the next pass reads it)."""
        self.removed.clear()
        self.failed.clear()

    def _again(self, pods: Iterable[str]) -> None:
        again = False
        for pod_key in pods:
            again |= pod_key in self.removed or pod_key in self.failed or pod_key in self.sent
            self.removed.discard(pod_key)
            self.failed.pop(pod_key, None)
            if pod_key in self.sent:
                self.redo.add(pod_key)
        if again:  # a pass, even without a change of state
            node = self.core.node
            node.publish()
            self.core.passes.want(node.generation)

    def _arm_check(self) -> None:
        if self.period > 0 and not self.checking and (self.removed or self.failed):
            self.checking = True
            self.core.emit(ArmTimer(CHECK_TIMER, self.period))


def _cgroup_of(members: Iterable[ContainerRecord]) -> tuple[str, str] | None:
    """(pod cgroup, "<namespace>/<pod>") from the first of a pod's kubelet containers that names it."""
    for t in members:
        if t.intent.kubelet and t.cgroups_path:
            cgroup = pod_cgroup(t.cgroups_path)
            if cgroup is not None:
                return cgroup, f"{t.intent.namespace}/{t.intent.pod_name}"
    return None
