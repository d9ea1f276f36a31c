"""The checkpoint, all of it: what a body holds (`Snapshot.body`, one entry per container with an
assignment, memory blocks included), how it is read back (`checkpoint_entries`, `held_from_checkpoint`,
`restore_memory`), and its document: JSON with a format version and a checksum (`encode`/`decode`;
`edge/checkpoint/file.py` reads and writes the file atomically, `edge/checkpoint/writer.py` behind the
replies).

A checkpoint is a hint for rebuilding state, never a gate: `read()` returns what it could use
and why it could not, and the service rebuilds from the runtime's view either way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..engine.admission_engine import Engine
from ..engine.cpumanager.state import Assignment, EngineState
from ..engine.cpuset import CPUSet
from ..engine.memorymanager.provider import memory_state
from ..engine.memorymanager.state import Block
from .state import ContainerRecord

FORMAT_VERSION = 1
KIND = "nri-pinner-checkpoint"
MAX_BYTES = 64 << 20  # far above any node's checkpoint; a hostile file (or /dev/zero) is not read whole


@dataclass(frozen=True)
class LoadedCheckpoint:
    body: dict[str, Any] | None  # None when unusable
    problem: str = ""  # why it was not usable ("" when fine or absent)


def _canonical(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _checksum(canonical: str) -> str:
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def encode(body: dict[str, Any]) -> bytes:
    """The document, compact with sorted keys: the body is encoded once, by json's C encoder (an
    indented dump takes json's pure-Python path, several times slower on a full node's body), and
    the checksum covers that same text. `nri-pinner status` is the readable view."""
    canonical = _canonical(body)
    return (f'{{"body":{canonical},"checksum":"{_checksum(canonical)}","kind":"{KIND}",'
            f'"version":{FORMAT_VERSION}}}\n').encode()


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
    if doc.get("checksum") != _checksum(_canonical(body)):
        return LoadedCheckpoint(None, "checksum mismatch (corrupt or edited)")
    return LoadedCheckpoint(body)


@dataclass(frozen=True)
class Snapshot:
    """What the body is built from. `containers` is a copy of the core's records dict: its `ContainerRecord`
    records are shared, but the fields read here (ids, the intent's key) never change."""

    state: EngineState
    containers: Mapping[str, ContainerRecord]
    reserved: CPUSet
    shared: CPUSet
    extra: Callable[[tuple[str, str]], dict[str, Any]] | None = None  # more per entry (memory blocks)

    def body(self) -> dict[str, Any]:
        entries = []
        for cid, t in self.containers.items():
            a = self.state.get(*t.key)
            if a is not None:
                more = self.extra(t.key) if self.extra is not None else {}
                role = {"role": t.intent.role} if t.intent.role else {}  # who said init or app (rebuild keeps it)
                stopped = {"stopped": True} if t.stopped else {}  # an exited container its pod keeps
                entries.append({"container_id": cid, "sandbox_id": t.sandbox_id, **a.to_dict(), **role, **stopped,
                                **more})
        return {"policy": "static", "reserved": str(self.reserved), "shared": str(self.shared), "entries": entries}


def checkpoint_entries(body: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    if not body:
        return {}
    entries = body.get("entries")
    if not isinstance(entries, list):
        return {}
    return {str(e["container_id"]): e for e in entries if isinstance(e, Mapping) and "container_id" in e}


def held_from_checkpoint(engine: Engine, entries: Mapping[str, Mapping[str, Any]]
                         ) -> tuple[EngineState, dict[str, tuple[str, str]], list[str]]:
    """The checkpoint's exclusive assignments held in a fresh state (until Synchronize replaces them
    with the runtime's view): (state, container id -> key held, problems). Entries that cannot be
    read are skipped with a problem each."""
    state = engine.initial_state()
    held: dict[str, tuple[str, str]] = {}
    problems: list[str] = []
    for cid, entry in entries.items():
        try:
            a = Assignment.from_dict(entry)
        except ValueError as exc:
            problems.append(f"checkpoint entry for {cid[:12]} ignored: {exc}")
            continue
        if a.exclusive:
            state = state.hold(a)
            held[cid] = a.key
    return state, held, problems


def entry_extras(engine: Engine, state: EngineState, key: tuple[str, str]) -> dict[str, Any]:
    """More for the container's checkpoint entry: its memory blocks, and its pod's CPU block when it is
    in one (pod scope, pod-level: rebuild.py restores the block from it); ``{}`` when neither."""
    out: dict[str, Any] = {}
    if (pod_block := state.pod_blocks.get(key[0])) is not None:
        out["pod_block"] = pod_block.to_dict()
    if engine.memory is None or "memory" not in state.providers:
        return out
    blocks = memory_state(state.providers["memory"]).get(*key)
    return {**out, "memory_blocks": [b.to_dict() for b in blocks]} if blocks else out


def restore_memory(engine: Engine, state: EngineState, key: tuple[str, str],
                   entry: Any, repairs: list[str]) -> EngineState:
    """Put a checkpointed container's memory blocks back (before anything new is admitted)."""
    if engine.memory is None or not isinstance(entry, dict) or not entry.get("memory_blocks"):
        return state
    try:
        blocks = tuple(Block.from_dict(b) for b in entry["memory_blocks"])
    except (ValueError, TypeError, AttributeError) as exc:
        repairs.append(f"{key[0]}/{key[1]}: checkpointed memory blocks unusable ({exc}); dropped")
        return state
    unknown = sorted({n for b in blocks for n in b.numa} - set(engine.memory.nodes))
    if unknown:
        repairs.append(f"{key[0]}/{key[1]}: checkpointed memory on unknown NUMA node(s) {unknown}; dropped")
        return state
    mstate = memory_state(state.providers.get("memory"))
    return state.with_provider("memory", mstate.with_blocks(*key, blocks))
