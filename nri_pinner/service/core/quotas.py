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
A pod's quota is never put back here: a pod loses its exclusive CPUs through a resize to shared, and
that resize writes the kubelet's quota into the pod cgroup itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import structlog

from .effects import ArmTimer, PodQuotaItem
from .events import PodQuotaResult
from .records import Tracked
from .reply_updates import update_quota

if TYPE_CHECKING:
    from .node import NodeCore

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

    def __init__(self, core: NodeCore) -> None:
        self.core = core
        self.enabled = core.settings.cpu_manager.disable_cpu_quota_with_exclusive_cpus
        self.period = core.settings.reconcile.period_seconds
        self.removed: set[str] = set()  # pod keys whose cgroup holds no quota
        self.failed: dict[str, str] = {}  # pod key -> why its last write failed (retried at the re-check)
        self.sent: set[str] = set()  # in the pass in flight
        self.redo: set[str] = set()  # ... and resized by the kubelet meanwhile: its result is stale
        self.recheck: set[str] = set()  # resized: due again when RESIZE_TIMER fires
        self.checking = False  # CHECK_TIMER armed
        self._noted = False  # cgroup writes off: said once

    # -- containers: what the NRI reply says -------------------------------------------------------
    def container_quota(self, t: Tracked) -> int | None:
        """The CPU quota the create's adjustment or an update of `t` sets: -1 while it holds exclusive
        CPUs and has a quota; None leaves the kubelet's."""
        quota = update_quota(self.enabled, self.core.node.state, t)
        if quota is not None and not self.core.cgroup_writes and not self._noted:
            self._noted = True
            log.warning("pods' CFS quota not removed: cgroup writes are off (reconcile.cgroup_writes, or a "
                        "read-only cgroup fs); exclusive containers still run without their own quota")
        return quota

    # -- pods: what a pass writes ---------------------------------------------------------------------
    def due(self) -> tuple[PodQuotaItem, ...]:
        """The pods a pass dispatched now writes: those with exclusive CPUs (a container of theirs
        holds some, running or exited) whose cgroup is not known to hold no quota."""
        if not self.enabled:
            return ()
        node = self.core.node
        exclusive = {a.pod for a in node.state.assignments.values() if a.exclusive}
        items: list[PodQuotaItem] = []
        wanted: set[str] = set()
        for pod_key in exclusive:
            members = node.containers.by_pod.get(pod_key)
            found = _cgroup_of(members.values()) if members else None
            if found is None:
                continue  # not a kubelet pod (no pod cgroup of its own), or not tracked
            wanted.add(pod_key)
            if pod_key not in self.removed and pod_key not in self.failed:
                items.append(PodQuotaItem(pod_key, found[0], found[1]))
        self.removed &= wanted
        for gone in [k for k in self.failed if k not in wanted]:
            del self.failed[gone]
        self.sent = {i.pod_key for i in items}
        self.redo.clear()
        return tuple(items)

    def written(self, results: Sequence[PodQuotaResult]) -> None:
        """A pass is back: which pods now hold no quota, which failed (retried at the re-check)."""
        for r in results:
            self.sent.discard(r.pod_key)
            why = r.error or r.untold
            if r.pod_key in self.redo:
                continue  # the kubelet wrote it again while the pass ran: the next pass looks again
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

    # -- what makes a pod due again -------------------------------------------------------------------
    def kubelet_resized(self, pod_key: str) -> None:
        """The kubelet's resize in this pod wrote the pod cgroup's quota (doPodResizeAction). Only a pod
        a pass took up matters: one that is due is written by the pass already asked for."""
        if pod_key not in self.removed and pod_key not in self.failed and pod_key not in self.sent:
            return
        self._again((pod_key,))
        self.recheck.add(pod_key)
        self.core.effects.append(ArmTimer(RESIZE_TIMER, RECHECK_SECONDS))

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
            self.core.effects.append(ArmTimer(CHECK_TIMER, self.period))


def _cgroup_of(members: Iterable[Tracked]) -> tuple[str, str] | None:
    """(pod cgroup, "<namespace>/<pod>") from the first of a pod's kubelet containers that names it."""
    for t in members:
        if t.intent.kubelet and t.cgroups_path:
            cgroup = pod_cgroup(t.cgroups_path)
            if cgroup is not None:
                return cgroup, f"{t.intent.namespace}/{t.intent.pod_name}"
    return None
