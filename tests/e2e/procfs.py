"""Small /proc readers used by the harness."""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def read_cpus_allowed_list(pid: int, proc: Path = PROC) -> str:
    """The ``Cpus_allowed_list`` value of /proc/<pid>/status, e.g. "0-1"."""
    status = proc / str(pid) / "status"
    for line in status.read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise ValueError(f"{status} has no Cpus_allowed_list line")


def memory_capacity_bytes(proc: Path = PROC) -> int:
    """MemTotal in bytes (the kubelet's memory capacity for oom_score_adj)."""
    meminfo = proc / "meminfo"
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemTotal:"):
            kib = line.split()[1]
            return int(kib) * 1024
    raise ValueError(f"{meminfo} has no MemTotal line")


def catches_signal(pid: int, signum: int, proc: Path = PROC) -> bool:
    """Whether the process has a handler for ``signum`` (SigCgt in /proc/<pid>/status)."""
    for line in (proc / str(pid) / "status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    raise ValueError(f"{proc / str(pid) / 'status'} has no SigCgt line")
