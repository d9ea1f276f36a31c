"""The checkpoint file: JSON with a format version and a checksum, written atomically.

A checkpoint is a hint for rebuilding state, never a gate: `read()` returns what it could use
and why it could not, and the service rebuilds from the runtime's view either way.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
KIND = "nri-pinner-checkpoint"


@dataclass(frozen=True)
class LoadedCheckpoint:
    body: dict[str, Any] | None  # None when unusable
    problem: str = ""  # why it was not usable ("" when fine or absent)


def _checksum(body: dict[str, Any]) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def encode(body: dict[str, Any]) -> bytes:
    doc = {"kind": KIND, "version": FORMAT_VERSION, "body": body, "checksum": _checksum(body)}
    return (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode()


def decode(data: bytes) -> LoadedCheckpoint:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return LoadedCheckpoint(None, f"not JSON ({exc})")
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        return LoadedCheckpoint(None, "not an nri-pinner checkpoint (foreign file)")
    if doc.get("version") != FORMAT_VERSION:
        return LoadedCheckpoint(None, f"format version {doc.get('version')!r}, expected {FORMAT_VERSION}")
    body = doc.get("body")
    if not isinstance(body, dict):
        return LoadedCheckpoint(None, "checkpoint body missing")
    if doc.get("checksum") != _checksum(body):
        return LoadedCheckpoint(None, "checksum mismatch (corrupt or edited)")
    return LoadedCheckpoint(body)


def read(path: str | Path) -> LoadedCheckpoint:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return LoadedCheckpoint(None)
    except OSError as exc:
        return LoadedCheckpoint(None, f"unreadable ({exc.strerror or exc})")
    return decode(data)


def write(path: str | Path, body: dict[str, Any]) -> None:
    """Temp file + fsync + rename + directory fsync: a crash leaves the old or the new file, never half."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, encode(body))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    dfd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
