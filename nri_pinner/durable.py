"""Making a rename last: after `os.replace`, the directory entry itself must reach the disk, or a crash
can bring the old file back (the checkpoint, an edited containerd config)."""

from __future__ import annotations

import os
from pathlib import Path


def sync_directory(directory: str | Path) -> None:
    """fsync the directory, so the entries renamed into it survive a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
