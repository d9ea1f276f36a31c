"""One `nri-pinner run` per inspection socket: an flock on ``<socket>.lock`` beside it, held for the
process's life, the holder's pid written inside (error messages name it; the shipped logrotate file
sends it SIGHUP). A socket that answers although nobody holds the lock (an instance of a version
without the lock) is refused too. The socket file is unlinked on exit only if it is still the one
this process bound: another process's socket is never removed.

The lock file itself is never unlinked (unlinking a lock file lets a waiter lock a deleted inode
while a third process locks a new one); on exit it is emptied, so a pid in it belongs to a holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path


class InstanceConflict(Exception):
    """Another live instance already serves this inspection socket; the message names both."""


def lock_path(socket_path: str | Path) -> Path:
    p = Path(socket_path)
    return p.with_name(p.name + ".lock")


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
    """The inspection socket claimed for this process (`claim`), released by `release`."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.lock, self._fd = path, lock_path(path), fd
        self._bound: tuple[int, int] | None = None

    def bound(self) -> None:
        """The server created the socket file: remember which file is ours."""
        st = self.path.stat()
        self._bound = (st.st_dev, st.st_ino)

    def release(self) -> None:
        """Unlink the socket if it is still ours, empty the lock file, let the lock go."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            st = self.path.lstat()
            if self._bound == (st.st_dev, st.st_ino):
                self.path.unlink()
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = -1


def claim(socket_path: str | Path) -> SocketClaim:
    """Take the inspection socket for this process, or raise InstanceConflict naming the other one."""
    path = Path(socket_path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    lock = lock_path(path)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        os.close(fd)
        raise InstanceConflict(
            f"another nri-pinner ({describe(holder)}) already serves the inspection socket {path} "
            f"(it holds {lock}): stop it first, or give this one another [inspect] socket") from None
    if _answers(path):
        os.close(fd)
        raise InstanceConflict(
            f"another process already serves the inspection socket {path} (an nri-pinner without the lock "
            f"{lock}?): stop it first, or give this one another [inspect] socket")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return SocketClaim(path, fd)
