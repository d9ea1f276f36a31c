"""`nri-pinner enable-nri`: turn NRI on in containerd's config file (containers/nri-plugins'
nri-config-manager does this from an init container; components/enable-nri runs this one there).

containerd 1.7 ships NRI off (`disable = true`, also when its table is absent); 2.x has it on. Which
table containerd reads depends on the file's `version`: 1 (no `version` key) is read by 1.7 through the
plugin's short id, ``[plugins.nri]`` (the full name is ignored there); 2 (1.7 and 2.x) and 3 (2.x only)
through ``[plugins."io.containerd.nri.v1.nri"]``. Version 3 needs no table: NRI is on unless disabled.

The edit is text, not a rewrite: the one `disable = true` line flipped, a `disable = false` line put
under the table's header, or the table appended; comments, order and quoting stay. No TOML writer is
needed for that, and tomllib checks the result: the new file must parse to exactly the old settings
with NRI's `disable` false, else nothing is written. A file it cannot edit that way (NRI in
`disabled_plugins`, the table written inline or as dotted keys, an imported file disabling it, an
unknown version) is refused with the reason, unchanged. The original is kept beside it before a write.
"""

from __future__ import annotations

import copy
import datetime
import difflib
import glob
import os
import re
import socket
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..durable import sync_directory

NRI = "io.containerd.nri.v1.nri"
SHORT = "nri"  # the id a version-1 file names it by (containerd 1.7)
DEFAULT_SOCKET = "/var/run/nri/nri.sock"
NEW_FILE = (
    "# written by nri-pinner enable-nri: NRI on; every other setting is containerd's default\n"
    "version = 2\n"
)
_HEADER = re.compile(r"^\s*\[\s*(?P<path>[^\[\]#]+?)\s*\]\s*(#.*)?$")  # [a.b] (not [[a.b]])
_ANY_HEADER = re.compile(r"^\s*\[")
_DISABLE = re.compile(r"^(?P<lead>\s*disable\s*=\s*)true(?P<rest>\s*(#.*)?)$")
_KEY = re.compile(r"^(?P<indent>\s*)[A-Za-z0-9_\"'-]+\s*=")


class EnableError(Exception):
    """The file cannot be edited safely; it is left as it was. The message says why."""


@dataclass
class Plan:
    text: str  # the new file (the old one when nothing is to change)
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    socket_path: str = DEFAULT_SOCKET  # where containerd serves NRI by this file
    connections: bool = True  # False: disable_connections, no socket is ever served


def _table_key(path: str) -> tuple[str, ...] | None:
    """``plugins."io.containerd.nri.v1.nri"`` → ("plugins", "io.containerd.nri.v1.nri"), via tomllib."""
    try:
        data = tomllib.loads(f"[{path}]\n")
    except tomllib.TOMLDecodeError:
        return None
    keys: list[str] = []
    while isinstance(data, dict) and len(data) == 1:
        (key, data), = data.items()
        keys.append(key)
    return tuple(keys)


def _sections(lines: list[str]) -> dict[tuple[str, ...], tuple[int, int]]:
    """Each [table] header's key → (header line, line after its last line)."""
    heads = [i for i, ln in enumerate(lines) if _ANY_HEADER.match(ln)]
    out: dict[tuple[str, ...], tuple[int, int]] = {}
    for n, i in enumerate(heads):
        found = _HEADER.match(lines[i].rstrip("\r\n"))
        key = _table_key(found.group("path")) if found else None
        if key is not None:
            out[key] = (i, heads[n + 1] if n + 1 < len(heads) else len(lines))
    return out


def _shown(name: str) -> str:
    return f"[plugins.{name}]" if name == SHORT else f'[plugins."{name}"]'


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def plan(text: str, source: str = "the file") -> Plan:
    """The edit that enables NRI in ``text``; EnableError when it cannot be made safely."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise EnableError(f"{source} is not valid TOML ({exc}): not edited") from None
    version = data.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version not in (1, 2, 3):
        raise EnableError(f"{source}: config version {version!r} is not one containerd 1.7 or 2.x reads "
                          "(1, 2, 3): not edited")
    disabled = data.get("disabled_plugins", [])
    if isinstance(disabled, list) and {NRI, SHORT} & set(disabled):
        raise EnableError(f"{source}: NRI is listed in disabled_plugins; take it out there by hand "
                          "(someone disabled it on purpose): not edited")
    plugins = data.get("plugins", {})
    if not isinstance(plugins, dict):
        raise EnableError(f"{source}: `plugins` is not a table: not edited")
    primary = SHORT if version == 1 else NRI
    # a version-1 file: 1.7 reads [plugins.nri], 2.x converts the file and also honours the full name
    names = (SHORT, NRI) if version == 1 else (NRI,)
    nl = _newline(text)
    lines = text.splitlines(keepends=True)
    sections = _sections(lines)
    out = Plan(text)
    expected = copy.deepcopy(data)
    inserts: list[tuple[int, str]] = []
    for name in names:
        table = plugins.get(name)
        if table is None:
            continue
        where = sections.get(("plugins", name))
        if not isinstance(table, dict) or where is None:
            raise EnableError(f"{source}: NRI's settings are not a {_shown(name)} table of their own (inline "
                              "or dotted keys); edit them by hand: not edited")
        if table.get("socket_path"):
            out.socket_path = str(table["socket_path"])
        if table.get("disable_connections") is True:
            out.connections = False
            out.notes.append(f"{_shown(name)}: disable_connections = true: external plugins (the DaemonSet, "
                             "the systemd unit) cannot connect; only pre-installed ones can")
        if "disable" in table and not isinstance(table["disable"], bool):
            raise EnableError(f"{source}: {_shown(name)} disable = {table['disable']!r} is not a boolean "
                              "(containerd refuses it): not edited")
        if table.get("disable") is True:
            head, end = where
            hits = [i for i in range(head + 1, end) if _DISABLE.match(lines[i].rstrip("\r\n"))]
            if len(hits) != 1:
                raise EnableError(f"{source}: no single `disable = true` line under {_shown(name)}: not edited")
            (i,) = hits
            line = lines[i]
            ending = line[len(line.rstrip("\r\n")):]
            found = _DISABLE.match(line.rstrip("\r\n"))
            assert found is not None
            lines[i] = f"{found.group('lead')}false{found.group('rest')}{ending}"
            out.changes.append(f"line {i + 1}: {_shown(name)} disable = true → false")
            expected["plugins"][name]["disable"] = False
        elif name == primary and "disable" not in table and version < 3:  # 1.7's default is off
            head, end = where
            lead = lines[head][: len(lines[head]) - len(lines[head].lstrip())]
            indent = next((m.group("indent") for i in range(head + 1, end) if (m := _KEY.match(lines[i]))),
                          lead + "  ")
            inserts.append((head + 1, f"{indent}disable = false{nl}"))
            out.changes.append(f"line {head + 2}: {_shown(name)} disable = false added (containerd 1.7's "
                               "default is off)")
            expected["plugins"][name]["disable"] = False
    for at, line in sorted(inserts, reverse=True):
        lines.insert(at, line)
    new = "".join(lines)
    if primary not in plugins and version < 3:
        quote = "'" if re.search(r"^\s*\[\s*plugins\s*\.\s*'", text, re.M) else '"'
        header = "[plugins.nri]" if version == 1 else f"[plugins.{quote}{NRI}{quote}]"
        gap = "" if not new or new.endswith(("\n\n", "\r\n\r\n")) else (nl if new.endswith("\n") else nl * 2)
        new += f"{gap}{header}{nl}  disable = false{nl}"
        out.changes.append(f"{header} appended with disable = false (containerd 1.7's default is off)")
        expected.setdefault("plugins", {})[primary] = {"disable": False}
    try:
        again = tomllib.loads(new)
    except tomllib.TOMLDecodeError as exc:
        raise EnableError(f"{source}: the edit would not parse ({exc}): not edited") from None
    if again != expected:
        raise EnableError(f"{source}: the edit would change more than NRI's disable: not edited")
    out.text = new
    return out


def check_imports(data: dict[str, Any], config: Path) -> None:
    """containerd merges `imports` over the file: one that disables NRI wins over any edit here."""
    patterns = data.get("imports", [])
    if not isinstance(patterns, list):
        return
    for pattern in patterns:
        full = pattern if os.path.isabs(pattern) else str(config.parent / pattern)
        for path in sorted(glob.glob(full)) if glob.has_magic(full) else [full]:
            if not os.path.exists(path):
                continue
            try:
                imported = tomllib.loads(Path(path).read_text())
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise EnableError(f"{config} imports {path}, which cannot be read ({exc}): not edited") from None
            plugins = imported.get("plugins", {})
            tables = [plugins.get(n) for n in (NRI, SHORT)] if isinstance(plugins, dict) else []
            disabled = imported.get("disabled_plugins", [])
            if any(isinstance(t, dict) and t.get("disable") is True for t in tables) or (
                    isinstance(disabled, list) and {NRI, SHORT} & set(disabled)):
                raise EnableError(f"{config} imports {path}, which disables NRI and overrides this file: "
                                  "enable it there: not edited")


def answers(path: str) -> bool:
    """NRI is being served: something accepts connections on its socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(path)
        except OSError:
            return False
    return True


def _write(path: Path, text: str, like: os.stat_result | None) -> None:
    """Temp file + fsync + rename + directory fsync, with the old file's mode and owner."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), like.st_mode & 0o7777 if like else 0o644)
            if like is not None and (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
                os.fchown(f.fileno(), like.st_uid, like.st_gid)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    sync_directory(path.parent)


def backup_path(path: Path) -> Path:
    """Beside the file, never *.toml (containerd's conf.d imports glob those)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate = path.with_name(f"{path.name}.{stamp}.nri-pinner-backup")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.{stamp}.{n}.nri-pinner-backup")
        n += 1
    return candidate


def restart_unit(bus: str, unit: str, timeout: float = 10.0) -> str:
    """systemd's RestartUnit(unit, "replace") over ``bus`` (the private socket, or a message bus);
    the job's object path. The job runs on after the answer (containerd's KillMode=process keeps the
    shims, so the pod running this keeps running)."""
    from jeepney import new_method_call

    from ..edge.cgroups.systemd_units import SYSTEMD, BusError, SystemdUnits

    units = SystemdUnits(bus, timeout)
    try:
        sock = units._connect()
        serial = units._next_serial()
        sock.sendall(new_method_call(SYSTEMD, "RestartUnit", "ss", (unit, "replace")).serialise(serial=serial))
        failed = units._collect(sock, {serial: unit})
    except (OSError, ValueError) as exc:
        raise BusError(str(exc)) from None
    finally:
        units.close()
    if failed:
        raise BusError(failed[unit])
    return f"asked systemd to restart {unit}"


def enable_nri(config: str, restart: bool = False, unit: str = "containerd.service",
               bus: str = "/run/systemd/private", dry_run: bool = False, *,
               out: TextIO, err: TextIO) -> int:
    """0: NRI is on in the file (edited or already); 2: refused, nothing written; 1: the restart failed."""
    given = Path(config)
    path = Path(os.path.realpath(given))  # a symlinked config is edited where it lives
    try:
        if not path.parent.is_dir():
            raise EnableError(f"{path.parent} does not exist (is the host's containerd config directory mounted?)")
        like = path.stat() if path.exists() else None
        try:
            text = path.read_bytes().decode() if like else NEW_FILE
        except UnicodeDecodeError:
            raise EnableError(f"{path} is not UTF-8 text: not edited") from None
        change = plan(text, str(given))
        check_imports(tomllib.loads(change.text), path)
    except EnableError as exc:
        print(f"nri-pinner enable-nri: {exc}", file=err)
        return 2
    except OSError as exc:
        print(f"nri-pinner enable-nri: {path}: {exc.strerror or exc}", file=err)
        return 2
    for note in change.notes:
        print(f"nri-pinner enable-nri: note: {given}: {note}", file=err)
    if like is not None and change.text == text:
        print(f"{given}: NRI is already enabled; nothing changed", file=out)
    elif dry_run:
        old = text.splitlines(keepends=True) if like else []
        out.writelines(difflib.unified_diff(old, change.text.splitlines(keepends=True), str(given), str(given)))
        return 0
    else:
        try:
            kept = None
            if like is not None:
                kept = backup_path(path)
                _write(kept, text, like)
            _write(path, change.text, like)
        except OSError as exc:
            print(f"nri-pinner enable-nri: cannot write {path}: {exc.strerror or exc}; not changed", file=err)
            return 2
        print(f"{given}: NRI enabled" + (f" ({path} created)" if like is None else f"; the original is {kept}"),
              file=out)
        for line in change.changes:
            print(f"  {line}", file=out)
    if not restart or dry_run:
        return 0
    if not change.connections:  # no socket would ever answer: a restart on every run would change nothing
        print(f"NRI serves no socket with disable_connections = true: {unit} not restarted", file=out)
        return 0
    if answers(change.socket_path):
        print(f"NRI answers on {change.socket_path}: {unit} not restarted", file=out)
        return 0
    try:
        print(restart_unit(bus, unit), file=out)
    except OSError as exc:
        print(f"nri-pinner enable-nri: cannot restart {unit} over {bus}: {exc}; restart it yourself "
              f"(systemctl restart {unit}): NRI is off until then", file=err)
        return 1
    return 0
