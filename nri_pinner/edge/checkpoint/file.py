"""The checkpoint file on disk: read at start (never a gate) and written atomically (temp file, fsync,
rename, directory fsync). What it holds: `core/checkpoint.py`."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

from ...core.checkpoint import FORMAT_VERSION, KIND, MAX_BYTES, LoadedCheckpoint, decode, encode
from ...durable import sync_directory

__all__ = ["FORMAT_VERSION", "KIND", "LoadedCheckpoint", "decode", "encode", "read", "write"]


def read(path: str | Path) -> LoadedCheckpoint:
    target = Path(path)
    _remove_stale_temps(target)
    try:
        # O_NONBLOCK: a FIFO put in its place must not block the start; it is refused below
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if target.is_symlink():
            return LoadedCheckpoint(None, f"dangling symlink to {os.readlink(target)!r}")
        return LoadedCheckpoint(None)
    except OSError as exc:
        return LoadedCheckpoint(None, f"unreadable ({exc.strerror or exc})")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return LoadedCheckpoint(None, "not a regular file")
        if info.st_size > MAX_BYTES:
            return LoadedCheckpoint(None, f"{info.st_size} bytes, more than a checkpoint can be")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        return LoadedCheckpoint(None, f"unreadable ({exc.strerror or exc})")
    finally:
        os.close(fd)
    return decode(data)


def _remove_stale_temps(target: Path) -> None:
    """A kill -9 between creating the temp file and the rename leaves it behind: remove it at start."""
    with contextlib.suppress(OSError):
        for stale in target.parent.glob(f".{target.name}.*.tmp"):
            if stale.name != _temp_name(target):
                stale.unlink(missing_ok=True)


def _temp_name(target: Path) -> str:
    return f".{target.name}.{os.getpid()}.tmp"


def _write_all(fd: int, data: bytes) -> None:
    """os.write may write less than asked (signals, quotas); go on until everything is written."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(f"write returned {written}")
        view = view[written:]


def write(path: str | Path, body: dict[str, Any]) -> None:
    """Temp file + fsync + rename + directory fsync: a crash leaves the old or the new file, never half.

    A failed write (disk full, read-only) raises OSError and leaves the old file and no temp file.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = encode(body)
    tmp = target.with_name(_temp_name(target))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    sync_directory(target.parent)
