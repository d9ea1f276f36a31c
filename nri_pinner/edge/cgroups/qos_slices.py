"""The QoS slices' part of a cgroup pass (`reconcile.systemd_pool_on_qos_slices`): core/qos_slices.py
decides, docs/systemd-pool-design.md explains.

A slice changes in at most two steps around the pass's own items, each told to systemd before it is
written (as for scopes: systemd then re-applies that very set):
- *narrowing*, before the items (with the items' systemd calls, in one batch): down to the CPUs it keeps
  — the new pool when it only loses CPUs or was never confirmed, old ∩ new when it both loses and gains;
  the kernel moves every task below it off the CPUs it loses within the write (cpuset.c
  `update_cpumasks_hier`);
- *widening*, after the items: up to the new pool, so a CPU an exclusive container gives back reaches
  the shared containers only once that container's own cgroup no longer holds it.

Then the containers below each slice: the wide set where the slice is confirmed to hold no more than
the pool (systemd answered its narrowing step and the write succeeded, or it needed none and was
confirmed before), else the pool itself, per scope — the fallback that keeps a slice systemd may put
back (stale `AllowedCPUs`) from ever being the only bound. Only containers whose cgroup differs from
that are told and written: none at an ordinary pool change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog

from ...core.effects import PassItem, SliceItem
from ...core.events import SliceResult, WriteResult
from ...engine.cpuset import CPUSet
from .cpuset_writer import CpusetWriter
from .paths import CgroupError

log = structlog.get_logger("nri_pinner.service")


def qos_slices_apply(wanted: bool, writer: CpusetWriter | None) -> tuple[str, ...] | None:
    """Whether `reconcile.systemd_pool_on_qos_slices` applies on this node: None = no, else the QoS slices
    found below the cgroup root (`kubepods.slice/kubepods-burstable.slice`, …; the core learns others
    from the containers' paths). It needs cgroup v2 and cgroup writes (the config refuses it without a
    systemd bus). Ignored, said once here: on cgroup v1 (and hybrid), where a parent cpuset may not be
    narrower than its children; for containers of the cgroupfs driver, said at the first one
    (core/qos_slices.py), whose cgroups are then written one by one."""
    if not wanted:
        return None
    why = ("cgroup writes are off" if writer is None or writer.units is None else
           "cgroup v1: a parent cpuset may not be narrower than its children" if writer.v1 else "")
    if why:
        log.warning("reconcile.systemd_pool_on_qos_slices ignored: every container's cgroup is written one by one",
                    reason=why)
        return None
    assert writer is not None
    found = []
    for parent in sorted(writer.root.glob("*.slice")):
        stem = parent.name.removesuffix(".slice")
        found += [unit for qos in ("burstable", "besteffort") if (parent / (unit := f"{stem}-{qos}.slice")).is_dir()]
    log.info("shared pool held on the kubelet's Burstable and BestEffort QoS slices (cgroup v2, systemd driver)",
             slices=found)
    return tuple(found)


def narrowing(s: SliceItem) -> CPUSet | None:
    """What the slice is narrowed to before the pass's items (None: it loses no CPU)."""
    if s.known == s.cpus or (s.known is not None and s.known.issubset(s.cpus)):
        return None
    if s.known is None or s.cpus.issubset(s.known):
        return s.cpus
    return (s.known & s.cpus) or s.cpus  # loses and gains: what it keeps first (never an empty cpuset)


def widening(s: SliceItem) -> CPUSet | None:
    """What it is widened to after them (None: nothing left to add)."""
    if s.known == s.cpus or narrowing(s) == s.cpus:
        return None
    return s.cpus


class SlicePass:
    """One pass's slices and the containers below them (the pass thread; one pass at a time)."""

    def __init__(self, writer: CpusetWriter, slices: Sequence[SliceItem]) -> None:
        self.writer, self.slices = writer, slices
        self.errors: dict[str, str] = {}  # slice -> a failed write
        self.untold: dict[str, str] = {}  # slice -> a step systemd did not confirm
        self.held: dict[str, CPUSet | None] = {s.unit: s.known for s in slices}  # what its cgroup holds, if known
        self.confirmed: dict[str, bool] = {}  # slice -> holds no more than the pool, systemd agreeing

    def narrowing_calls(self) -> list[tuple[str, CPUSet]]:
        """The systemd calls of the narrowing steps, sent with the items' calls."""
        return [(s.unit, step) for s in self.slices if (step := narrowing(s)) is not None]

    def narrow(self, untold: Mapping[str, str]) -> None:
        """Before the pass's items: each slice that loses CPUs written down to what it keeps."""
        for s in self.slices:
            step = narrowing(s)
            if step is None:
                self.confirmed[s.unit] = s.known is not None  # it held a subset of the pool, confirmed
                continue
            self._step(s, step, untold.get(s.unit, ""))
            self.confirmed[s.unit] = s.unit not in self.errors and s.unit not in self.untold

    def finish(self) -> tuple[list[WriteResult], list[SliceResult]]:
        """After the pass's items: the widening steps, then the containers below each slice."""
        widen = [(s, step) for s in self.slices if (step := widening(s)) is not None]
        below: list[tuple[PassItem, CPUSet]] = []
        for s in self.slices:
            for k in s.children:
                cpus = k.cpus if self.confirmed[s.unit] else s.cpus
                if k.known != (cpus, k.mems):
                    below.append((k, cpus))
        untold = self.writer.tell_systemd(((k.cgroups_path, cpus, k.mems) for k, cpus in below),
                                          slices=[(s.unit, step) for s, step in widen])
        for s, step in widen:
            self._step(s, step, untold.get(s.unit, ""))
        results = []
        for k, cpus in below:
            try:
                self.writer.apply(k.cgroups_path, cpus, k.mems, k.known)
            except CgroupError as exc:
                results.append(WriteResult(k.container_id, cpus, k.mems, error=str(exc)))
                continue
            results.append(WriteResult(k.container_id, cpus, k.mems, untold=untold.get(k.cgroups_path, "")))
        return results, [SliceResult(s.unit, s.cpus, self.errors.get(s.unit, ""), self.untold.get(s.unit, ""))
                         for s in self.slices]

    def _step(self, s: SliceItem, cpus: CPUSet, untold: str) -> None:
        """One step: systemd was told `cpus` (`untold`: it did not confirm), now the cgroup is written."""
        if untold:
            self.untold.setdefault(s.unit, untold)
        try:
            self.writer.apply_slice(s.path, cpus, self.held[s.unit])
        except CgroupError as exc:
            self.errors.setdefault(s.unit, str(exc))
            self.held[s.unit] = None  # unknown now: the next step reads it
            return
        self.held[s.unit] = cpus
