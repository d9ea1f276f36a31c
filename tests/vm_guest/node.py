"""The guest node as the kernel shows it, and the systemd calls the kubelet's systemd driver makes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from nri_pinner.engine.cpuset import CPUSet

NODE_DIR = Path("/sys/devices/system/node")


def numa_nodes() -> dict[int, CPUSet]:
    """{node: its CPUs} of the nodes that have CPUs."""
    out = {}
    for d in sorted(NODE_DIR.glob("node[0-9]*")):
        cpus = CPUSet.parse((d / "cpulist").read_text().strip())
        if cpus:
            out[int(d.name[4:])] = cpus
    return out


def nodes_of(cpus: CPUSet) -> CPUSet:
    """The NUMA nodes holding ``cpus`` (a node set, formatted like a cpuset)."""
    return CPUSet(n for n, held in numa_nodes().items() if not held.isdisjoint(cpus))


def status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"/proc/{pid}/status has no {name}")


def systemd_driver() -> bool:
    return os.environ.get("NRI_PINNER_E2E_CGROUP_DRIVER") == "systemd"


def systemctl(*args: str, timeout: float = 120) -> str:
    res = subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"systemctl {' '.join(args)}: exit {res.returncode}: {res.stderr.strip()}")
    return res.stdout


def allowed_cpus_of_unit(unit: str) -> str:
    """systemd's AllowedCPUs of a unit ("" when unset), as a cpuset string ("0-1 4-7" -> "0-1,4-7")."""
    value = systemctl("show", "-p", "AllowedCPUs", "--value", unit).strip()
    return str(CPUSet.parse(value.replace(" ", ","))) if value else ""


def record_figures(name: str, figures: dict[str, Any]) -> None:
    """Figures for the part's summary ($NRI_PINNER_VM_FIGURES/<name>.json), and a line in the log."""
    print(f"\ne2e: {name}: {json.dumps(figures, sort_keys=True)}")
    folder = os.environ.get("NRI_PINNER_VM_FIGURES")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.json").write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
