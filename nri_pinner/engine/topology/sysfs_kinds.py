"""Core kinds of hybrid CPUs (Intel P/E cores, ARM big.LITTLE), as hwloc's cpukinds find them.

Sources, first found wins:

* Intel hybrid: the ``cpu_core`` and ``cpu_atom`` PMUs list their CPUs
  (``/sys/devices/cpu_core/cpus``, ``/sys/devices/cpu_atom/cpus``): kinds "P" and "E".
* ``cpuN/cpu_capacity`` (arm64, some x86): CPUs with the highest capacity are
  "big", the lowest "little", any in between "mid-<capacity>". Only read when the
  first online CPU has the file, so uniform x86 machines pay one failed open.
* ``cpuN/cpufreq/cpuinfo_max_freq`` when there is no capacity: the same naming, but
  only when the slowest maximum is below 80% of the fastest. Intel "favored cores"
  (Turbo Boost Max 3.0) differ by a few percent and are one kind, not big.LITTLE.

A machine with one kind gets no kinds at all ("" for every CPU).
"""

from __future__ import annotations

from pathlib import Path

from ..cpuset import CPUSet
from .sysfs_read import Reader


def core_kinds(r: Reader, cpu_dir: Path, online: CPUSet) -> tuple[dict[int, str], str]:
    """CPU -> kind for online CPUs, and the source; ({}, "") on uniform machines."""
    devices = r.root / "sys" / "devices"
    perf = r.cpulist(devices / "cpu_core" / "cpus")
    eff = r.cpulist(devices / "cpu_atom" / "cpus")
    if perf is not None and eff is not None and perf & online and eff & online:
        kinds = {c: "P" for c in perf & online} | {c: "E" for c in eff & online}
        unknown = online - CPUSet(kinds)
        if unknown:
            r.warn(f"CPUs {unknown} are in neither cpu_core nor cpu_atom: kind unknown")
        return kinds, "cpu_core/cpu_atom PMUs"
    if not online:
        return {}, ""
    for rel, source, min_ratio in (("cpu_capacity", "cpu_capacity", 1.0),
                                   ("cpufreq/cpuinfo_max_freq", "cpufreq max", 0.8)):
        if r.int(cpu_dir / f"cpu{online.min()}" / rel) is None:
            continue
        value = {c: r.int(cpu_dir / f"cpu{c}" / rel) for c in online}
        values = sorted({v for v in value.values() if v is not None and v > 0})
        if len(values) < 2 or values[0] >= values[-1] * min_ratio:
            return {}, ""
        names = {values[-1]: "big", values[0]: "little"}
        kinds = {c: names.get(v, f"mid-{v}") for c, v in value.items() if v is not None and v > 0}
        unknown = online - CPUSet(kinds)
        if unknown:
            r.warn(f"{rel} missing for CPUs {unknown}: kind unknown")
        return kinds, source
    return {}, ""
