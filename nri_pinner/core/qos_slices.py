"""The shared pool held on the kubelet's QoS slices, the core's side (`reconcile.systemd_pool_on_qos_slices`;
docs/systemd-pool-design.md has the reasoning and the sources).

On cgroup v2 a cgroup runs on its own `cpuset.cpus` intersected with its parent's effective set, and a
parent may be narrower than its children. Under the systemd driver every Burstable and BestEffort pod's
slice sits in `kubepods-burstable.slice` or `kubepods-besteffort.slice`, and no container below them is
ever exclusive (their QoS class is read from that very parent: intent.py). So once such a slice holds
the shared pool — systemd told, then its cgroup written — the containers below it may hold every online
CPU (the *wide* set) in their own cgroups, and a pool change writes the slices only: a constant number
of systemd calls, whatever the number of containers. The shared containers of Guaranteed pods (in
their pod's slice beside the QoS slices) and the exclusive containers are written per scope, as
without the setting.

A container gets the wide set only once its slice is confirmed (systemd answered, the cgroup write
succeeded) to hold no more than the pool: from a pass, or from the reply to its create or to a resize
once started (runc applies a reply at a moment no pass can know, so the reply names the set the passes
would write; and a start then costs no systemd call of ours). Every other reply names the pool, as
without the setting. A slice a pass cannot confirm has every container below it written to the pool
per scope in that same pass (edge/cgroups/qos_slices.py), so an exclusive container's start, which waits
for the pass, waits for that too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from ..engine.cpuset import CPUSet
from .effects import PassItem, SliceItem
from .events import SliceResult
from .state import ContainerRecord, Told

if TYPE_CHECKING:
    from .context import CoreContext

log = structlog.get_logger("nri_pinner.service")

QOS_SLICES = ("-burstable", "-besteffort")  # the kubelet's QoS cgroup names (qos_container_manager_linux.go)
PROBE_PREFIX = "slice:"  # a drift probe of a QoS slice, not of a container


def qos_slice(cgroups_path: str) -> str | None:
    """The QoS slice above a container's pod slice, from NRI's systemd-driver `linux.cgroups_path`:
    `kubepods-burstable-pod<uid>.slice:cri-containerd:<id>` → `kubepods-burstable.slice`. None for a
    Guaranteed pod (`kubepods-pod<uid>.slice`), a cgroupfs path, or a container outside kubepods."""
    if not cgroups_path or cgroups_path.startswith("/") or cgroups_path.count(":") != 2:
        return None
    pod_slice = cgroups_path.split(":", 1)[0]
    if not pod_slice.endswith(".slice"):
        return None
    parent, _, last = pod_slice.removesuffix(".slice").rpartition("-")
    if not last.startswith("pod") or not parent.endswith(QOS_SLICES):
        return None
    return f"{parent}.slice"


def slice_path(unit: str) -> str:
    """A slice's cgroup below the hierarchy's root, by systemd's nesting rule (as the edge's
    edge/cgroups/paths.py expand_systemd_slice): `a-b.slice` → `/a.slice/a-b.slice`."""
    parts = unit.removesuffix(".slice").split("-")
    return "/" + "/".join("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


class QosSlices:
    """The slices that hold the pool and what each was last confirmed to hold (node thread only)."""

    def __init__(self, core: CoreContext, enabled: bool, found: Sequence[str] = ()) -> None:
        self.core, self.enabled = core, enabled
        self.told: dict[str, CPUSet] = {}  # slice unit -> the pool systemd and its cgroup were confirmed to hold
        # every slice found at start or below a container: each pass keeps them at the pool (the processes
        # below one are bounded by it whether tracked or not: pause containers, those made while away)
        self.seen: set[str] = set(found) if enabled else set()
        self._noted_cgroupfs = False

    def slice_of(self, t: ContainerRecord, exclusive: bool | None = None) -> str | None:
        """The QoS slice that holds `t`'s CPUs: a shared container's below a QoS slice; else None."""
        if not self.enabled or not t.cgroups_path:
            return None
        unit = qos_slice(t.cgroups_path)
        if unit is None:
            if t.cgroups_path.startswith("/") and not self._noted_cgroupfs:
                self._noted_cgroupfs = True
                log.warning("reconcile.systemd_pool_on_qos_slices does not apply to cgroupfs-driver containers: "
                            "their cgroups are written one by one", cgroups_path=t.cgroups_path)
            return None
        if exclusive is None:
            a = self.core.node.assignment(t)
            exclusive = a is not None and a.exclusive
        return None if exclusive else unit

    def wide(self) -> CPUSet:
        """What a container below a confirmed slice holds in its own cgroup: every online CPU."""
        return self.core.node.engine.topology.online

    def own(self, t: ContainerRecord) -> Told:
        """What `t`'s own cgroup is to hold: the wide set below a confirmed slice, else its desired set
        (drift checks, the start's check for a lagging cgroup)."""
        desired = self.core.node.desired(t)
        unit = self.slice_of(t)
        return (self.wide(), desired[1]) if unit is not None and unit in self.told else desired

    def lags(self, t: ContainerRecord) -> bool:
        """`t` is below a slice not confirmed yet: a pass is due (its start asks for one)."""
        unit = self.slice_of(t)
        return unit is not None and unit not in self.told

    def holds(self, t: ContainerRecord) -> bool:
        """`t`'s CPUs are bounded by a confirmed slice: a stale runtime record of it is harmless (its
        effective set stays inside the slice's), so the runtime record updates leave it alone."""
        unit = self.slice_of(t)
        return unit is not None and unit in self.told

    def items(self, children: dict[str, list[PassItem]], pool: CPUSet) -> tuple[SliceItem, ...]:
        """A pass's slices: those not confirmed at `pool`, or with a container below to write."""
        out = []
        for unit in sorted(self.seen | children.keys()):
            kids = children.get(unit, [])
            known = self.told.get(unit)
            if known == pool and all(k.known == (k.cpus, k.mems) for k in kids):
                continue
            self.seen.add(unit)
            out.append(SliceItem(unit, slice_path(unit), pool, known, tuple(kids)))
        return tuple(out)

    def written(self, results: Sequence[SliceResult]) -> bool:
        """A pass's slice results; True when one was not confirmed (the pass then counts as failed)."""
        failed = False
        for r in results:
            if r.error or r.untold:
                failed = True
                self.told.pop(r.unit, None)
                log.warning("QoS slice not confirmed at the shared pool: the containers below it were written "
                            "one by one; tried again at the next change or drift check", slice=r.unit,
                            cpus=str(r.cpus), error=r.error or r.untold)
            else:
                self.told[r.unit] = r.cpus
        return failed

    # -- drift -------------------------------------------------------------------------------------
    def probes(self) -> list[tuple[str, str, str]]:
        """(probe id, name, cgroup path) of every confirmed slice, read with the containers."""
        return [(PROBE_PREFIX + unit, unit, slice_path(unit)) for unit in sorted(self.told)]

    def drifted(self, probe_id: str, actual: CPUSet) -> bool:
        """A slice's read-back: one that holds another set is rewritten by the next pass. True: drift."""
        unit = probe_id.removeprefix(PROBE_PREFIX)
        held = self.told.get(unit)
        if held is None or held == actual:
            return False
        self.told.pop(unit)
        log.warning("QoS slice cpuset drift; the next pass rewrites it", slice=unit, actual=str(actual),
                    desired=str(held))
        return True

    def due(self) -> bool:
        """A slice is due a pass: one written before and not confirmed since (the drift check retries it)."""
        return self.enabled and bool(self.seen - self.told.keys())
