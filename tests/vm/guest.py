"""The VM node tier, host side: boot a QEMU guest (Debian trixie, systemd as PID 1, cgroup v2, several
NUMA nodes) once, run the parts in ``tests/vm/parts/`` inside it, and hand back their results.

The image comes from ``scripts/vm/build-image.sh`` (cached under ``build/vm/image``). Each boot runs on a
throw-away qcow2 overlay of it, sees the working tree read-only at ``/host/repo`` and writes results to a
second 9p share at ``/out`` (on the host: ``GuestRun.out``). QEMU runs under TCG: this machine's KVM is
PVM, which cannot run Debian kernels. Boots serialise through an flock so concurrent callers queue.

In the guest each part runs with (see ``scripts/vm/guest-job.sh``): ``OUT=/out/<part>`` (fresh),
``REPO=/host/repo`` (read-only), ``WORK=/var/tmp/vm-work/<part>`` (fresh, writable, the cwd),
``VM_DRIVER``, ``VM_TOPOLOGY``, ``PART_TIMEOUT``, ``PY`` (the venv python), ``PATH`` (venv bin first),
``PYTHONPATH=/host/repo``, ``PYTHONPYCACHEPREFIX=/var/tmp/pycache``,
``NRI_PINNER_E2E_WORKDIR=/var/tmp/nri-pinner-e2e-work``, ``HOME=/root``, ``TMPDIR=/tmp``, plus ``env``.

Command line (tests/vm/__main__.py): ``python -m tests.vm run TOPOLOGY DRIVER [PART...]`` (prints the
results), ``python -m tests.vm shell [TOPOLOGY]`` (interactive root shell on the serial console; no job)
and ``python -m tests.vm soak …`` (boot counts per TCG mode: tests/vm/soak.py).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .console import fault_summary

REPO = Path(__file__).resolve().parents[2]
PARTS_DIR = REPO / "tests" / "vm" / "parts"
BUILD_SCRIPT = REPO / "scripts" / "vm" / "build-image.sh"
JOB_SCRIPT = REPO / "scripts" / "vm" / "guest-job.sh"
BUILD_DIR = Path(os.environ.get("NRI_PINNER_VM_BUILD_DIR", str(REPO / "build" / "vm")))
RUNS_DIR = BUILD_DIR / "runs"
LOCK_PATH = Path("/run/lock/nri-pinner-vm.lock")
DRIVERS = ("systemd", "cgroupfs")
DEFAULT_PART_TIMEOUT = 900.0
BOOT_ALLOWANCE = 300.0  # kernel + userspace under TCG on a busy host (seen: 34-58 s), generously
KEEP_RUNS = 12
POWEROFF_GRACE = 60.0  # seconds from the job's "done" marker to QEMU's exit before QEMU is killed
QEMU = "qemu-system-x86_64"
# TCG: /dev/kvm here is PVM. The Intel vendor makes Linux read SMT and cache sharing from CPUID 4/0xB.
# One TCG thread for all vCPUs: under thread=multi the guest kernel's live text patching (static keys,
# text_poke_bp) races a vCPU still running the patched code, and the guest oopses on an int3 about one
# boot in ten on a busy host (docs/vm-tier.md "Single-threaded TCG" has the counts).
TCG_THREADS = ("single", "multi")
CPU_MODEL = ["-cpu", "max,vendor=GenuineIntel,family=6,model=85,stepping=7"]


def accel_args(thread: str = "single") -> list[str]:
    if thread not in TCG_THREADS:
        raise ValueError(f"TCG thread mode {thread!r}: one of {', '.join(TCG_THREADS)}")
    return ["-accel", f"tcg,thread={thread},tb-size=256", *CPU_MODEL]


KERNEL_ARGS = "root=/dev/vda rw console=ttyS0,115200 panic=-1"


class VMError(RuntimeError):
    """The image could not be built, the guest did not boot, or a part did not run."""


@dataclass(frozen=True)
class Topology:
    """A guest shape. CPUs are numbered as QEMU and Linux enumerate them: socket, then core, then
    thread (cpu = (socket * cores + core) * threads + thread). Each socket holds ``nodes_per_socket``
    NUMA nodes, splitting its cores in equal consecutive runs (SNC-style when > 1)."""

    name: str
    sockets: int
    cores: int  # per socket
    threads: int  # per core
    nodes_per_socket: int
    memory_mib: int
    distance_socket: int  # between two nodes of one socket (nodes_per_socket > 1)
    distance_remote: int  # between nodes of different sockets

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores * self.threads

    @property
    def nodes(self) -> int:
        return self.sockets * self.nodes_per_socket

    def cpu(self, socket: int, core: int, thread: int) -> int:
        return (socket * self.cores + core) * self.threads + thread

    def socket_of(self, cpu: int) -> int:
        return cpu // (self.cores * self.threads)

    def core_of(self, cpu: int) -> int:
        """The core's index within its socket (what sysfs calls core_id here)."""
        return (cpu // self.threads) % self.cores

    def node_of_core(self, socket: int, core: int) -> int:
        return socket * self.nodes_per_socket + core // (self.cores // self.nodes_per_socket)

    def node_of(self, cpu: int) -> int:
        return self.node_of_core(self.socket_of(cpu), self.core_of(cpu))

    def node_cpus(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {n: [] for n in range(self.nodes)}
        for cpu in range(self.cpus):
            out[self.node_of(cpu)].append(cpu)
        return out

    def siblings(self, cpu: int) -> list[int]:
        first = cpu - cpu % self.threads
        return list(range(first, first + self.threads))

    def distance(self, a: int, b: int) -> int:
        if a == b:
            return 10
        if a // self.nodes_per_socket == b // self.nodes_per_socket:
            return self.distance_socket
        return self.distance_remote

    def distances(self) -> list[list[int]]:
        return [[self.distance(a, b) for b in range(self.nodes)] for a in range(self.nodes)]

    def qemu_args(self) -> list[str]:
        if self.cores % self.nodes_per_socket or self.memory_mib % self.nodes:
            raise ValueError(f"{self.name}: cores and memory must split evenly over the NUMA nodes")
        args = ["-m", f"{self.memory_mib}M",
                "-smp", f"{self.cpus},sockets={self.sockets},cores={self.cores},threads={self.threads}"]
        for node in range(self.nodes):
            args += ["-object", f"memory-backend-ram,id=m{node},size={self.memory_mib // self.nodes}M",
                     "-numa", f"node,nodeid={node},memdev=m{node}"]
        for socket in range(self.sockets):
            for core in range(self.cores):
                node = self.node_of_core(socket, core)
                args += ["-numa", f"cpu,node-id={node},socket-id={socket},core-id={core}"]
        for a in range(self.nodes):
            for b in range(a + 1, self.nodes):
                args += ["-numa", f"dist,src={a},dst={b},val={self.distance(a, b)}"]
        return args


TOPOLOGIES: dict[str, Topology] = {
    # two sockets, one NUMA node each
    "2s2c2t": Topology("2s2c2t", sockets=2, cores=2, threads=2, nodes_per_socket=1, memory_mib=4096,
                       distance_socket=10, distance_remote=20),
    # sub-NUMA clustering: two nodes per socket, 4 nodes of 4 CPUs
    "snc4": Topology("snc4", sockets=2, cores=4, threads=2, nodes_per_socket=2, memory_mib=6144,
                     distance_socket=11, distance_remote=21),
}


@dataclass(frozen=True)
class PartResult:
    exit: int
    log: str
    dir: Path


@dataclass
class GuestRun:
    topology: str
    driver: str
    parts: tuple[str, ...]
    run_dir: Path
    out: Path  # the per-part result dirs (the guest's /out)
    console: Path  # the serial console log
    boot_seconds: float | None  # QEMU start to the job's start; None if the job never started
    seconds: float  # QEMU start to its exit (or to the kill at the timeout)
    image_seconds: float  # what making sure the image was current took (a build, or the check)
    timed_out: bool
    qemu_exit: int | None
    part_seconds: dict[str, float] = field(default_factory=dict)

    def console_tail(self, lines: int = 60) -> str:
        try:
            text = self.console.read_text(errors="replace")
        except OSError as exc:
            return f"(no console log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def kernel_fault(self) -> str | None:
        """The guest kernel's oopses, BUGs and panics in one line (tests/vm/console.py), or None."""
        try:
            return fault_summary(self.console.read_text(errors="replace"))
        except OSError:
            return None

    def part(self, name: str) -> PartResult:
        part_dir = self.out / name
        exit_file = part_dir / "exit"
        try:
            code = int(exit_file.read_text().strip())
        except (OSError, ValueError) as exc:
            state = ("timed out" if self.timed_out else f"qemu exit {self.qemu_exit}") + (
                f", job started after {self.boot_seconds:.0f} s" if self.boot_seconds is not None
                else ", the job never started")
            listed = "" if name in self.parts else f" (not among this boot's parts: {', '.join(self.parts)})"
            fault = self.kernel_fault()
            raise VMError(f"{fault + ': ' if fault else ''}"
                          f"VM part {name!r} did not run{listed} in the {self.topology}/{self.driver} boot "
                          f"({state}; {exit_file}: {exc}). Console ({self.console}) tail:\n"
                          f"{self.console_tail()}") from None
        try:
            log = (part_dir / "log").read_text(errors="replace")
        except OSError:
            log = ""
        return PartResult(exit=code, log=log, dir=part_dir)


def all_parts() -> list[str]:
    return sorted(p.name for p in PARTS_DIR.iterdir() if p.is_file() and os.access(p, os.X_OK))


def missing_requirements() -> str | None:
    """Why this host cannot boot the guest, or None."""
    if os.geteuid() != 0:
        return "the VM tier needs root (debootstrap, chroot, 9p shares)"
    for tool in (QEMU, "qemu-img", "debootstrap", "mkfs.ext4"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install qemu-system-x86 qemu-utils debootstrap)"
    return None


def build_image() -> tuple[Path, float]:
    """scripts/vm/build-image.sh (a no-op when its inputs did not change): the image dir and seconds."""
    start = time.monotonic()
    res = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, check=False,
                         env={**os.environ, "NRI_PINNER_VM_BUILD_DIR": str(BUILD_DIR)})
    if res.returncode != 0:
        raise VMError(f"{BUILD_SCRIPT} failed ({res.returncode}):\n{res.stderr[-6000:]}")
    lines = res.stdout.strip().splitlines()
    if not lines:
        raise VMError(f"{BUILD_SCRIPT} printed no image directory:\n{res.stderr[-3000:]}")
    return Path(lines[-1]), time.monotonic() - start


@contextmanager
def boot_lock() -> Iterator[None]:
    """One guest at a time on this host (TCG on 2 cores): other callers wait here."""
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_PATH.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def qemu_command(topology: Topology, image: Path, overlay: Path, console: str, out: Path | None,
                 kernel_args: str = KERNEL_ARGS, tcg_thread: str = "single") -> list[str]:
    cmd = [QEMU, "-name", f"nri-pinner-vm-{topology.name}", "-machine", "q35", *accel_args(tcg_thread),
           *topology.qemu_args(),
           "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-nic", "none",
           "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.img"), "-append", kernel_args,
           "-drive", f"file={overlay},if=virtio,format=qcow2,cache=unsafe",
           "-virtfs", f"local,path={REPO},mount_tag=repo,security_model=none,readonly=on",
           "-serial", console]
    if out is not None:
        cmd += ["-virtfs", f"local,path={out},mount_tag=out,security_model=none"]
    return cmd


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def start_qemu(cmd: Sequence[str], stdout: int | IO[Any]) -> subprocess.Popen[bytes]:
    """QEMU killed with the process that started it: a killed `python -m tests.vm run` (or pytest) must
    not leave a guest running beside the next boot, whose boot lock its death released. The signal comes
    when the starting thread ends, so start it from the thread that waits for it."""
    libc, parent = ctypes.CDLL(None, use_errno=True), os.getpid()

    def die_with_parent() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the prctl
            os._exit(1)

    return subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.STDOUT,
                            preexec_fn=die_with_parent)


def make_overlay(image: Path, overlay: Path) -> None:
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image / "rootfs.img"),
                    str(overlay)], check=True, capture_output=True)


def _prune_runs() -> None:
    if not RUNS_DIR.is_dir():
        return
    runs = sorted((p for p in RUNS_DIR.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for old in runs[:-KEEP_RUNS]:
        shutil.rmtree(old, ignore_errors=True)


def _env_file(values: Mapping[str, str]) -> str:
    for key in values:
        if not key.isidentifier():
            raise ValueError(f"not an environment variable name: {key!r}")
    return "".join(f"{key}={shlex.quote(value)}\n" for key, value in values.items())


def boot(topology: str, driver: str, parts: Sequence[str] | None = None, timeout: float | None = None,
         env: Mapping[str, str] | None = None) -> GuestRun:
    """Boot ``topology`` once and run ``parts`` (default: every executable in tests/vm/parts, by name)
    in it, in order; the guest powers off after the last. ``timeout`` (default: the boot allowance +
    PART_TIMEOUT + 60 s per part) bounds the whole boot: QEMU is killed past it, or when the job has
    not started within the boot allowance (300 s), and the parts that did not finish raise from
    ``GuestRun.part``. ``env`` is added to every part's environment; its
    PART_TIMEOUT (else $NRI_PINNER_VM_PART_TIMEOUT, else 900) is the per-part limit."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; known: {', '.join(TOPOLOGIES)}")
    if driver not in DRIVERS:
        raise ValueError(f"unknown driver {driver!r}; known: {', '.join(DRIVERS)}")
    available = all_parts()
    chosen = list(available if parts is None else parts)
    unknown = [p for p in chosen if p not in available]
    if unknown:
        raise ValueError(f"no executable part {', '.join(unknown)} in {PARTS_DIR}")
    extra = dict(env or {})
    part_timeout = float(extra.get("PART_TIMEOUT") or os.environ.get("NRI_PINNER_VM_PART_TIMEOUT")
                         or DEFAULT_PART_TIMEOUT)
    limit = timeout if timeout is not None else BOOT_ALLOWANCE + len(chosen) * (part_timeout + 60)
    shape = TOPOLOGIES[topology]
    job_env = {**extra, "VM_DRIVER": driver, "VM_TOPOLOGY": topology, "PART_TIMEOUT": f"{part_timeout:g}"}

    with boot_lock():
        image, image_seconds = build_image()
        _prune_runs()
        run_dir = RUNS_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-{topology}-{driver}-{os.getpid()}"
        out = run_dir / "out"
        job = out / ".job"
        job.mkdir(parents=True)
        shutil.copy(JOB_SCRIPT, job / "job.sh")
        (job / "env").write_text(_env_file(job_env))
        (job / "parts").write_text("".join(f"{p}\n" for p in chosen))
        overlay = run_dir / "overlay.qcow2"
        console = run_dir / "console.log"
        make_overlay(image, overlay)
        cmd = qemu_command(shape, image, overlay, f"file:{console}", out)
        (run_dir / "qemu.cmd").write_text(shlex.join(cmd) + "\n")
        start = time.monotonic()
        boot_seconds: float | None = None
        timed_out = False
        with (run_dir / "qemu.log").open("w") as qemu_log:
            proc = start_qemu(cmd, qemu_log)
            try:
                done_at: float | None = None
                while proc.poll() is None:
                    now = time.monotonic()
                    if boot_seconds is None and (job / "started").exists():
                        boot_seconds = now - start
                    if done_at is None and (job / "done").exists():
                        done_at = now
                    if done_at is not None and now - done_at > POWEROFF_GRACE:
                        break  # every result is written; a guest that does not power off is killed
                    if now - start > limit or (boot_seconds is None and now - start > BOOT_ALLOWANCE):
                        timed_out = True
                        proc.kill()
                        break
                    time.sleep(0.5)
            finally:
                if proc.poll() is None:
                    proc.kill()
                qemu_exit = proc.wait()
        seconds = time.monotonic() - start
        if boot_seconds is None and (job / "started").exists():
            boot_seconds = seconds
        overlay.unlink(missing_ok=True)
    part_seconds: dict[str, float] = {}
    for name in chosen:
        with suppress(OSError, ValueError):
            part_seconds[name] = float((out / name / "seconds").read_text())
    return GuestRun(topology=topology, driver=driver, parts=tuple(chosen), run_dir=run_dir, out=out,
                    console=console, boot_seconds=boot_seconds, seconds=seconds, image_seconds=image_seconds,
                    timed_out=timed_out, qemu_exit=qemu_exit, part_seconds=part_seconds)
