"""Find installed runtimes and remove what a (possibly crashed) private containerd left on the host.

Everything here is scoped by paths only one harness instance uses (its config file, sockets, runc root,
workdir, the pod cgroups it recorded), so cleaning never touches another containerd or another run.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

INSTALL_PREFIX = Path(os.environ.get("NRI_PINNER_E2E_PREFIX", "/opt/nri-pinner-e2e"))
CGROUP_ROOT = Path("/sys/fs/cgroup")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSTALL_HINT = "run scripts/install-runtimes.sh (as root) to install both runtimes"


class RuntimeMissing(RuntimeError):
    """The requested containerd is not installed here; tests skip with this message."""


@dataclass(frozen=True)
class RuntimeInstall:
    """A containerd build: ``bin_dir`` holds containerd, ctr and containerd-shim-runc-v2."""

    key: str
    bin_dir: Path
    reported: str  # `containerd --version`

    @property
    def containerd(self) -> Path:
        return self.bin_dir / "containerd"

    @property
    def ctr(self) -> Path:
        return self.bin_dir / "ctr"

    @property
    def major(self) -> int:
        return int(self.key.split(".")[0])

    def env(self) -> dict[str, str]:
        # containerd finds its shim through PATH: this build's directory must come first.
        return {**os.environ, "PATH": f"{self.bin_dir}:{SYSTEM_PATH}"}


RUNTIME_LOCATIONS = {
    "1.7": Path("/usr/bin"),  # Debian package containerd/trixie
    "2.1": INSTALL_PREFIX / "containerd2" / "usr" / "bin",  # sid's containerd, unpacked privately
}


def find_runtime(key: str) -> RuntimeInstall:
    """The installed containerd for ``key`` ("1.7" or "2.1"); raises RuntimeMissing with a reason."""
    if key not in RUNTIME_LOCATIONS:
        raise ValueError(f"unknown runtime {key!r}; known: {', '.join(RUNTIME_LOCATIONS)}")
    bin_dir = RUNTIME_LOCATIONS[key]
    for name in ("containerd", "ctr", "containerd-shim-runc-v2"):
        if not os.access(bin_dir / name, os.X_OK):
            raise RuntimeMissing(f"containerd {key}: {bin_dir / name} not found; {INSTALL_HINT}")
    if not os.access("/usr/sbin/runc", os.X_OK):
        raise RuntimeMissing(f"runc not found at /usr/sbin/runc; {INSTALL_HINT}")
    reported = subprocess.run(
        [str(bin_dir / "containerd"), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # e.g. "containerd github.com/containerd/containerd 1.7.24~ds1 ..." / ".../v2 2.1.9+unknown"
    found = re.search(r"\s(\d+)\.(\d+)\.\d+", reported)
    major = key.split(".")[0]
    if not found or found.group(1) != major:
        raise RuntimeMissing(f"containerd {key}: {bin_dir}/containerd reports {reported!r}; {INSTALL_HINT}")
    return RuntimeInstall(key, bin_dir, reported)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kill_processes_mentioning(needle: str, sig: int = signal.SIGKILL) -> list[int]:
    """Signal every process whose command line contains ``needle`` (a path unique to one instance)."""
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        if needle in _cmdline(int(entry.name)):
            try:
                os.kill(int(entry.name), sig)
                killed.append(int(entry.name))
            except ProcessLookupError:
                pass
    return killed


def wait_gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}").exists() and _state(p) != "Z" for p in pids):
            return True
        time.sleep(0.05)
    return False


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def delete_runc_containers(runc_root: Path) -> None:
    """Force-delete containers in a private runc root (one subdirectory per containerd namespace)."""
    if not runc_root.is_dir():
        return
    for ns_root in (p for p in runc_root.iterdir() if p.is_dir()):
        for container in (p for p in ns_root.iterdir() if p.is_dir()):
            subprocess.run(
                ["/usr/sbin/runc", "--root", str(ns_root), "delete", "--force", container.name],
                capture_output=True,
                check=False,
            )


def _unescape_mount(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def unmount_below(*prefixes: Path) -> None:
    """Lazily unmount every mount point below the given directories, deepest first."""
    wanted = tuple(str(p).rstrip("/") + "/" for p in prefixes)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = _unescape_mount(line.split()[4])
        if (point + "/").startswith(wanted):
            points.append(point)
    for point in sorted(set(points), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def remove_cgroup_tree(relative: str, timeout: float = 5.0) -> None:
    """rmdir ``relative`` (e.g. /kubepods/burstable/pod<uid>) and its children in every hierarchy.
    Only empty cgroups can go; processes may take a moment to leave after being killed."""
    rel = relative.strip("/")
    if not rel.startswith("kubepods/") or "/pod" not in "/" + rel:
        raise ValueError(f"refusing to remove cgroup {relative!r}: not a kubepods pod cgroup")
    if not CGROUP_ROOT.is_dir():
        return
    deadline = time.monotonic() + timeout
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / rel
        if not top.is_dir():
            continue
        dirs = sorted((Path(d) for d, _, _ in os.walk(top)), key=lambda p: len(p.parts), reverse=True)
        for d in dirs:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # still busy: leave it; it is empty of our processes or another owns it
                    time.sleep(0.05)


def stop_pod_slice(unit: str) -> None:
    """systemd driver: stop a pod's slice (kills what is left in it; systemd removes the cgroups).
    Only kubelet pod slices, e.g. kubepods-burstable-pod<uid>.slice."""
    if not re.fullmatch(r"kubepods(-[a-z]+)?-pod[0-9a-f_]+\.slice", unit):
        raise ValueError(f"refusing to stop unit {unit!r}: not a kubepods pod slice")
    subprocess.run(["systemctl", "stop", unit], capture_output=True, check=False, timeout=120)


def _start_time(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def record_pid(record: Path, pid: int) -> None:
    """Remember a process we started (pid + start time, so a reused pid is never mistaken for it)."""
    with record.open("a") as f:
        f.write(f"{pid} {_start_time(pid)}\n")


def kill_recorded(record: Path) -> None:
    if not record.exists():
        return
    pids = []
    for line in record.read_text().splitlines():
        pid_s, _, started = line.partition(" ")
        pid = int(pid_s)
        if started and _start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
                pids.append(pid)
            except ProcessLookupError:
                pass
    wait_gone(pids, 10)
    record.unlink()
