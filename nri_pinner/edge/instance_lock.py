"""One `nri-pinner run` per inspection socket: an flock on ``<socket>.lock`` beside it, held for the
process's life, the holder's pid written inside (error messages name it; the shipped logrotate file
sends it SIGHUP). A socket that answers although nobody holds the lock (an instance of a version
without the lock) is refused too. The socket file is unlinked on exit only if it is still the one
this process bound: another process's socket is never removed.

The lock file itself is never unlinked (unlinking a lock file lets a waiter lock a deleted inode
while a third process locks a new one); on exit it is emptied, so a pid in it belongs to a holder.

Two instances with different inspection sockets still collide where it matters: both register with
the same runtime and both claim every container's cpuset. So `run` also takes a node-wide lock keyed
on the NRI socket it registers on (the config's ``[nri] socket``; a pre-installed plugin's fd comes
from the runtime behind that same default socket), canonicalised (``/var/run`` is ``/run``):
``/run/nri-pinner/nri-<socket path, systemd-escaped>.lock``. /run/nri-pinner is writable in every
mode: the unit's RuntimeDirectory (kept across stops, RuntimeDirectoryPreserve=yes, so a refused
unit does not delete another instance's lock), the DaemonSet's hostPath mount, and root's own /run
for a pre-installed plugin. ``NRI_PINNER_INSTALL_ROOT`` moves it under that directory, as it does
every host path `install` touches.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
from pathlib import Path

RUN_DIR = "/run/nri-pinner"
ROOT_ENV = "NRI_PINNER_INSTALL_ROOT"


class InstanceConflict(Exception):
    """Another live instance already serves this inspection socket; the message names both."""


def lock_path(socket_path: str | Path) -> Path:
    p = Path(socket_path)
    return p.with_name(p.name + ".lock")


def _escape(path: str) -> str:
    """systemd-escape --path: "/run/nri/nri.sock" → "run-nri-nri.sock" (one name per path)."""
    out = []
    for i, ch in enumerate(path.strip("/")):
        if ch == "/":
            out.append("-")
        elif (ch.isascii() and ch.isalnum()) or ch == "_" or (ch == "." and i > 0):
            out.append(ch)
        else:
            out.extend(f"\\x{b:02x}" for b in ch.encode())
    return "".join(out)


def runtime_lock_path(nri_socket: str | Path, root: str | None = None) -> Path:
    """The node-wide lock of the runtime behind ``nri_socket`` (under $NRI_PINNER_INSTALL_ROOT if set)."""
    name = _escape(os.path.realpath(nri_socket))
    if len(name) > 200:  # a file name is at most 255 bytes
        name = hashlib.sha256(name.encode()).hexdigest()
    base = Path(root if root is not None else os.environ.get(ROOT_ENV) or "/")
    return base / RUN_DIR.lstrip("/") / f"nri-{name}.lock"


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def describe(pid_text: str) -> str:
    """``pid N: <its command line>`` from /proc, or what is known."""
    if not pid_text.isdigit():
        return "an instance whose pid is not recorded"
    try:
        argv = Path(f"/proc/{pid_text}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid_text}"
    return f"pid {pid_text}: {' '.join(a.decode(errors='replace') for a in argv if a)}"


class SocketClaim:
    """The inspection socket (and the runtime) claimed for this process (`claim`), released by `release`."""

    def __init__(self, path: Path, fd: int, runtime_fd: int = -1) -> None:
        self.path, self.lock, self._fd, self._runtime_fd = path, lock_path(path), fd, runtime_fd
        self._bound: tuple[int, int] | None = None

    def bound(self, st: os.stat_result | None = None) -> None:
        """The server created the socket file ``st`` (default: what the path holds now): it is ours."""
        st = st or self.path.stat()
        self._bound = (st.st_dev, st.st_ino)

    def release(self) -> None:
        """Unlink the socket if it is still ours, empty the lock file, let the lock go."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            st = self.path.lstat()
            if self._bound == (st.st_dev, st.st_ino):
                self.path.unlink()
        for fd in (self._fd, self._runtime_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                os.close(fd)
        self._fd = self._runtime_fd = -1


def _lock(path: Path) -> tuple[int, str]:
    """An fd holding an exclusive flock on ``path`` with this pid written in it, or (-1, the holder's pid)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        os.close(fd)
        return -1, holder
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd, ""


def claim_runtime(nri_socket: str | Path) -> int:
    """The node-wide lock of the runtime behind ``nri_socket``: its fd, or InstanceConflict naming the
    holder (OSError, one line, when it cannot be taken at all)."""
    lock = runtime_lock_path(nri_socket)
    try:
        fd, holder = _lock(lock)
    except OSError as exc:
        raise OSError(f"cannot take the node-wide instance lock {lock}: {exc.strerror or exc} "
                      f"(a run that is not root: set {ROOT_ENV})") from None
    if fd < 0:
        raise InstanceConflict(
            f"another nri-pinner ({describe(holder)}) already registers with the runtime on the NRI socket "
            f"{os.path.realpath(nri_socket)} (it holds {lock}): two would both claim every container's "
            "cpuset; stop it first")
    return fd


def claim(socket_path: str | Path, nri_socket: str | Path | None = None) -> SocketClaim:
    """Take the inspection socket for this process, and with ``nri_socket`` the runtime behind it too
    (`claim_runtime`), or raise InstanceConflict naming the other instance; nothing is held then."""
    path = Path(socket_path)
    lock = lock_path(path)
    fd, holder = _lock(lock)
    if fd < 0:
        raise InstanceConflict(
            f"another nri-pinner ({describe(holder)}) already serves the inspection socket {path} "
            f"(it holds {lock}): stop it first, or give this one another [inspect] socket")
    if _answers(path):
        os.close(fd)
        raise InstanceConflict(
            f"another process already serves the inspection socket {path} (an nri-pinner without the lock "
            f"{lock}?): stop it first, or give this one another [inspect] socket")
    try:
        runtime_fd = claim_runtime(nri_socket) if nri_socket is not None else -1
    except BaseException:
        os.ftruncate(fd, 0)
        os.close(fd)
        raise
    return SocketClaim(path, fd, runtime_fd)
