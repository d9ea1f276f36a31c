"""Lenient reading of sysfs files: the only place discovery touches the filesystem.

Real trees carry trailing NULs and stray whitespace, old kernels have only hex masks,
and files vanish under hotplug. Every helper returns ``None`` for a missing or
unparsable file and records one warning for content it could not parse, so
discovery can always fall back to another source. Reads are counted (the
benchmark reports them; discovery should read only what its answer needs).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..cpuset import CPUSet, CPUSetError

_STRIP = " \t\r\n\x00"
_MASK = re.compile(r"[0-9a-fA-F]+(,[0-9a-fA-F]+)*")
_MAX_CPUS = 1 << 16  # more than any kernel's NR_CPUS: larger ids are garbage, not CPUs


class SysfsError(ValueError):
    """The sysfs root itself cannot be read: the only discovery failure."""


class Reader:
    """Reads files under ``<root>/sys/devices/system`` (and ``<root>/sys/devices`` for PMUs)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.system = root / "sys" / "devices" / "system"
        self.files_read = 0
        self.warnings: list[str] = []
        self._bad: set[str] = set()
        self._absent: set[str] = set()  # names missing both ways: the kernel does not have them

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def _bad_file(self, path: Path, what: str, text: str) -> None:
        key = f"{path}"
        if key not in self._bad:  # one warning per file, however often it is asked for
            self._bad.add(key)
            self.warn(f"{path}: {what}, got {text[:40]!r}: ignored")

    # -- raw ---------------------------------------------------------------
    def text(self, path: Path) -> str | None:
        """Content with surrounding whitespace and NULs stripped; None if absent or unreadable."""
        self.files_read += 1
        try:
            with open(path, "rb") as f:
                data = f.read(1 << 20)
        except FileNotFoundError:
            return None
        except OSError as exc:  # EACCES, EIO, EISDIR, ENOTDIR: treat as absent, say so
            if not isinstance(exc, NotADirectoryError | IsADirectoryError):
                self._bad_file(path, f"unreadable ({exc.strerror})", "")
            return None
        return data.decode("ascii", "replace").strip(_STRIP)

    def listdir(self, path: Path) -> list[str]:
        try:
            return os.listdir(path)
        except OSError:
            return []

    def isdir(self, path: Path) -> bool:
        return os.path.isdir(path)

    # -- typed -------------------------------------------------------------
    def int(self, path: Path) -> int | None:
        text = self.text(path)
        if text is None:
            return None
        try:
            return int(text.split()[0]) if text else None
        except ValueError:
            self._bad_file(path, "expected an integer", text)
            return None

    def cpulist(self, path: Path) -> CPUSet | None:
        """A kernel list file (``0-3,8``); an empty file is the empty set."""
        text = self.text(path)
        if text is None:
            return None
        try:
            cpus = CPUSet.parse(text.split("\x00")[0].strip(_STRIP))
        except CPUSetError:
            self._bad_file(path, "expected a CPU list", text)
            return None
        if cpus and max(cpus) >= _MAX_CPUS:
            self._bad_file(path, f"CPU id beyond {_MAX_CPUS}", text)
            return None
        return cpus

    def cpumask(self, path: Path) -> CPUSet | None:
        """A kernel mask file: comma-separated 32-bit hex words, most significant first."""
        text = self.text(path)
        if text is None:
            return None
        word = text.split("\x00")[0].strip(_STRIP)
        if not _MASK.fullmatch(word):
            self._bad_file(path, "expected a hex CPU mask", text)
            return None
        mask = 0
        for part in word.split(","):
            mask = (mask << 32) | int(part, 16)
        if mask >> _MAX_CPUS:
            self._bad_file(path, f"mask beyond {_MAX_CPUS} CPUs", text)
            return None
        return CPUSet.from_mask(mask)

    def cpus(self, directory: Path, name: str) -> CPUSet | None:
        """The mask file ``name`` (what hwloc reads, on every kernel), else its ``_list`` twin.

        A name missing both ways is not asked for again (one kernel writes the same files for
        every CPU): one failed open per name instead of one per CPU.
        """
        if name in self._absent:
            return None
        mask = self.cpumask(directory / name)
        if mask is not None:
            return mask
        found = self.cpulist(directory / f"{name}_list")
        if found is None:
            self._absent.add(name)
        return found
