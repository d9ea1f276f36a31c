"""A pod cgroup made and resized as the kubelet does under the systemd cgroup driver on cgroup v2: a
transient slice unit told its resources over D-Bus, then the same values written into the cgroup.

Derived from the source (kubelet lines: kubernetes/kubernetes pkg/kubelet/cm, v1.32 and newer alike
where not said otherwise; runc lines: libcontainer/cgroups/systemd as kubernetes/kubernetes vendors it
at 018211b5, runc v1.1, and opencontainers/cgroups systemd/ at 0080fa4a, what kubelet v1.33+ vendors):

- pod_container_manager_linux.go EnsureExists: CgroupConfig{Name: the pod's, ResourceParameters:
  ResourceConfigForPod(...)}; PidsLimit only `if m.podPidsLimit > 0` (the default -1 sets none) →
  cgroupManager.Create.
- cgroup_manager_linux.go cgroupCommon.Create: libctCgroupConfig(cfg, true), manager.Apply(-1), then
  manager.Set(resources). libctCgroupConfig under systemd: `dir, base := path.Split(in.Name.ToSystemd())`,
  Parent = path.Base(dir) ("-.slice" for "/"), Name = base. toResources: SkipDevices, CpuWeight =
  getCPUWeight(CPUShares) on v2, CpuQuota, CpuPeriod, Memory (hugetlb limits: maybeSetHugetlb, not
  modelled: the pod has no hugepages and the test looks at the cpu controller only).
- runc systemd v2.go unifiedManager.Apply(pid -1): getUnitName = Name (it ends in ".slice");
  StartTransientUnit(name, "replace", [Description "libcontainer container <Name>", Wants <Parent> (a
  slice: Wants, not Slice=), MemoryAccounting, CPUAccounting, IOAccounting, TasksAccounting true,
  DefaultDependencies false, c.SystemdProps (the kubelet sets none)]) — no PIDs (pid -1), no Delegate (a
  slice), no resources; startUnit waits for the job, an existing unit is fine (ignoreExist for pid -1);
  then fs2.CreateCgroupPath (systemd made the directory already).
- unifiedManager.Set: genV2ResourcesProperties → SetUnitProperties(name, runtime=true, ...): devices
  skipped (SkipDevices: generateDeviceProperties returns none), MemoryMax if Memory != 0, CPUWeight if
  != 0, addCpuQuota (CPUQuotaPeriodUSec if period != 0, systemd >= 242; CPUQuotaPerSecUSec = quota x 1 s /
  period rounded up to 10 ms, or USEC_INFINITY for a quota <= 0, if quota or period != 0), TasksMax only
  for a PidsLimit > 0 or -1; then fs2 Manager.Set writes memory.max, cpu.weight, cpu.max "<quota|max>
  <period>" (fs2/memory.go setMemory, fs2/cpu.go setCpu).
- The in-place resize of the pod cgroup: kuberuntime_manager.go doPodResizeAction → SetPodCgroupConfig
  with only CPUQuota and CPUPeriod → kubelet v1.33+ cgroupCommon.SetCgroupConfig → Update →
  libctCgroupConfig(cfg, true) + manager.Set: SetUnitProperties [CPUQuotaPeriodUSec, CPUQuotaPerSecUSec],
  then cpu.max. (v1.32's cgroup_v2_manager_linux.go setCgroupCPUConfig wrote cpu.max alone, telling
  systemd nothing; the v1.33+ path is the one that also changes what systemd holds.)

The D-Bus transport is the plugin's own wire client (nri_pinner.edge.cgroups.systemd_units.SystemdUnits on
systemd's private socket, proven in the guest by part 20); what is sent is the kubelet's.
"""

from __future__ import annotations

import contextlib
import posixpath
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jeepney import Message, new_method_call

from nri_pinner.edge.cgroups.systemd_units import SYSTEMD, USEC_INFINITY, SystemdUnits

from . import node_env
from .kubelet_model import MAX_SHARES, MIN_SHARES

CGROUP_V2_ROOT = Path("/sys/fs/cgroup")
Property = tuple[str, tuple[str, Any]]


@dataclass(frozen=True)
class PodResources:
    """The ResourceConfig the kubelet computes for the pod cgroup (cm/helpers_linux.go
    ResourceConfigForPod): cpu shares, quota (-1 = none), period, memory limit (0 = none)."""

    cpu_shares: int
    cpu_quota: int
    cpu_period: int
    memory: int = 0


def unit_and_parent(cgroup_parent: str) -> tuple[str, str]:
    """(the slice unit, its parent slice) for the expanded systemd cgroup name the kubelet sends as the
    sandbox's cgroup_parent ("/kubepods.slice/kubepods-pod<uid_>.slice"): cgroup_manager_linux.go
    libctCgroupConfig's path.Split / path.Base."""
    directory, base = posixpath.split(cgroup_parent)
    if not base.endswith(".slice"):
        raise ValueError(f"not a systemd pod cgroup: {cgroup_parent!r}")
    return base, "-.slice" if directory in ("", "/") else posixpath.basename(directory)


def cpu_weight(shares: int) -> int:
    """cgroup_manager_linux.go getCPUWeight: shares [MIN_SHARES, MAX_SHARES] → weight [1, 10000]."""
    if shares >= MAX_SHARES:
        return 10000
    return 1 + (shares - MIN_SHARES) * 9999 // (MAX_SHARES - MIN_SHARES)


def apply_properties(unit: str, parent: str) -> list[Property]:
    """runc systemd v2.go unifiedManager.Apply(-1) for a slice, in its order."""
    return [("Description", ("s", f"libcontainer container {unit}")),
            ("Wants", ("as", [parent])),
            ("MemoryAccounting", ("b", True)), ("CPUAccounting", ("b", True)),
            ("IOAccounting", ("b", True)), ("TasksAccounting", ("b", True)),
            ("DefaultDependencies", ("b", False))]


def quota_properties(quota: int, period: int) -> list[Property]:
    """runc systemd common.go addCpuQuota (opencontainers/cgroups: addCPUQuota)."""
    props: list[Property] = []
    if period:
        props.append(("CPUQuotaPeriodUSec", ("t", period)))
    if quota or period:
        per_sec = USEC_INFINITY
        if quota > 0:
            per_sec = quota * 1_000_000 // (period or 100_000)
            per_sec = -(-per_sec // 10_000) * 10_000  # whole percents of a CPU, rounded up
        props.append(("CPUQuotaPerSecUSec", ("t", per_sec)))
    return props


def set_properties(res: PodResources) -> list[Property]:
    """runc systemd v2.go genV2ResourcesProperties for what toResources fills in a pod's ResourceConfig
    (no devices, no swap, no pids limit, no cpuset), in its order."""
    props: list[Property] = []
    if res.memory:
        props.append(("MemoryMax", ("t", res.memory)))
    if res.cpu_shares:  # CPUShares nil (a resize's config): CpuWeight 0, not sent
        props.append(("CPUWeight", ("t", cpu_weight(res.cpu_shares))))
    return props + quota_properties(res.cpu_quota, res.cpu_period)


def cpu_max(quota: int, period: int) -> str:
    """fs2/cpu.go setCpu: "max" for a quota <= 0, the period appended when set."""
    text = str(quota) if quota > 0 else "max"
    return f"{text} {period}" if period else text


def start_call(unit: str, parent: str) -> Message:
    msg: Message = new_method_call(SYSTEMD, "StartTransientUnit", "ssa(sv)a(sa(sv))",
                                   (unit, "replace", apply_properties(unit, parent), []))
    return msg


def set_call(unit: str, props: list[Property]) -> Message:
    msg: Message = new_method_call(SYSTEMD, "SetUnitProperties", "sba(sv)", (unit, True, props))
    return msg


def _call(unit: str, msg: Message, exists_ok: bool = False) -> None:
    """One call, confirmed by systemd; ``exists_ok``: runc's startUnit with ignoreExist (pid -1) takes
    an existing unit as made."""
    units = SystemdUnits(timeout=node_env.scaled(3.0))
    try:
        failed = units.call([(unit, msg)])
    finally:
        units.close()
    if failed and not (exists_ok and "org.freedesktop.systemd1.UnitExists" in failed[unit]):
        raise RuntimeError(f"systemd: {unit}: call not confirmed: {failed[unit]}")


def shown(unit: str, prop: str) -> str:
    """What systemd holds for a unit's property (`systemctl show -p <prop> --value`)."""
    out = subprocess.run(["systemctl", "show", "-p", prop, "--value", unit], capture_output=True, text=True,
                         check=True, timeout=node_env.scaled(30))
    return out.stdout.strip()


def cgroup_dir(cgroup_parent: str) -> Path:
    return CGROUP_V2_ROOT / cgroup_parent.strip("/")


def create(cgroup_parent: str, res: PodResources) -> Path:
    """cgroupCommon.Create under systemd on v2: Apply(-1) then Set. Returns the slice's cgroup."""
    unit, parent = unit_and_parent(cgroup_parent)
    d = cgroup_dir(cgroup_parent)
    _call(unit, start_call(unit, parent), exists_ok=True)
    # startUnit waits for the start job's "done"; the slice's cgroup is there once it is active
    deadline = time.monotonic() + node_env.scaled(10.0)
    while not (shown(unit, "ActiveState") == "active" and d.is_dir()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{unit} not active with its cgroup {d} in time")
        time.sleep(0.05)
    create_cgroup_path(d)
    update(cgroup_parent, res)
    return d


def create_cgroup_path(d: Path) -> None:
    """runc fs2/create.go CreateCgroupPath (the fs2 manager's Apply; the systemd one's after its unit
    started): each directory from the root down to ``d`` made if missing, and in each ancestor every
    controller the root offers (its cgroup.controllers) enabled in cgroup.subtree_control — all at once,
    else one by one, failures ignored (the setXXX writes report them)."""
    wanted = ["+" + c for c in (CGROUP_V2_ROOT / "cgroup.controllers").read_text().split()]
    rel = d.relative_to(CGROUP_V2_ROOT)
    for step in [*reversed(rel.parents), rel]:  # the root ("."), ..., d
        current = CGROUP_V2_ROOT / step
        current.mkdir(exist_ok=True)
        if step == rel:
            break
        control = current / "cgroup.subtree_control"
        try:
            control.write_text(" ".join(wanted))
        except OSError:
            for one in wanted:
                with contextlib.suppress(OSError):
                    control.write_text(one)


def update(cgroup_parent: str, res: PodResources) -> None:
    """unifiedManager.Set: the unit's properties (runtime), then fs2 Manager.Set's writes."""
    unit, _ = unit_and_parent(cgroup_parent)
    _call(unit, set_call(unit, set_properties(res)))
    d = cgroup_dir(cgroup_parent)
    if res.memory:
        (d / "memory.max").write_text(str(res.memory))
    if res.cpu_shares:
        (d / "cpu.weight").write_text(str(cpu_weight(res.cpu_shares)))
    if res.cpu_quota or res.cpu_period:
        (d / "cpu.max").write_text(cpu_max(res.cpu_quota, res.cpu_period))


def resize_cpu(cgroup_parent: str, quota: int, period: int) -> None:
    """The pod cgroup's new CPU limit in an in-place resize (kubelet v1.33+ SetCgroupConfig → Update): a
    ResourceConfig holding only CPUQuota and CPUPeriod (shares 0: no CPUWeight, no cpu.weight write)."""
    update(cgroup_parent, PodResources(cpu_shares=0, cpu_quota=quota, cpu_period=period))
