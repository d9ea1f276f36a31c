"""Running the example NRI plugins (logger, pin_fixed) against a PrivateContainerd, and reading what they
and containerd logged: JSON-lines event logs, pre-installed launcher scripts, containerd log timing."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
LOGGER_MODULE = "examples.logger"
PIN_MODULE = "examples.pin_fixed"

Event = dict[str, Any]


class PluginLogError(AssertionError):
    pass


def plugin_argv(module: str, *args: str) -> list[str]:
    """argv running an example plugin with this interpreter (absolute path: also used in launchers)."""
    return [sys.executable, "-m", module, *args]


def write_launcher(path: Path, argv: list[str], stderr_log: Path) -> Path:
    """A pre-installed plugin launcher: containerd runs ``plugin_path/NN-name`` with no arguments and only
    the NRI_PLUGIN_* environment, so the script carries absolute paths and the options."""
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in argv)
    path.write_text(f"#!/bin/sh\ncd '{REPO}' || exit 1\nexec {quoted} 2>>'{stderr_log}'\n")
    path.chmod(0o755)
    return path


def read_events(log: Path) -> list[Event]:
    if not log.exists():
        return []
    lines = log.read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def wait_for_event(
    log: Path, event: str, match: Callable[[Event], bool] = lambda _e: True, timeout: float = 15.0
) -> Event:
    """The first ``event`` line in the plugin's JSON-lines log for which ``match`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        for entry in read_events(log):
            if entry.get("event") == event and match(entry):
                return entry
        if time.monotonic() > deadline:
            seen = [e.get("event") for e in read_events(log)]
            raise PluginLogError(f"no matching {event} in {log} after {timeout}s; events seen: {seen}")
        time.sleep(0.05)


_TIME_RE = re.compile(r'^time="(?P<time>[^"]+)"')


def log_time(line: str) -> float:
    """Unix time of a containerd (logrus) log line, ``time="2026-11-23T01:08:06.760269583Z" ...``."""
    found = _TIME_RE.match(line)
    if found is None:
        raise ValueError(f"containerd log line without a time field: {line!r}")
    stamp = found.group("time")
    # datetime keeps microseconds: drop the nanosecond digits.
    stamp = re.sub(r"\.(\d{6})\d*", r".\1", stamp).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


def first_line(log: str, pattern: str, after: int = 0) -> tuple[int, str]:
    """(offset past the line, line) of the first log line at or after ``after`` matching ``pattern``."""
    found = re.compile(pattern).search(log, after)
    if found is None:
        raise PluginLogError(f"no {pattern!r} in containerd log")
    start = log.rfind("\n", 0, found.start()) + 1
    end = log.find("\n", found.end())
    end = len(log) if end < 0 else end
    return end, log[start:end]


def sync_seconds(log: str, plugin: str) -> float:
    """Runtime-side Synchronize time of ``plugin`` (``<idx>-<name>``): from containerd's
    ``synchronizing plugin`` line to the invocation-order entry that lists the plugin (logged once
    the reply was accepted), i.e. wire transfer + plugin decode + handler + reply."""
    after, begin = first_line(log, rf"synchronizing plugin {re.escape(plugin)}\b")
    _, listed = first_line(log, r"#\d+: \\?\"" + re.escape(plugin) + r"\\?\"", after)
    return log_time(listed) - log_time(begin)


def processes_with(needle: str) -> list[tuple[int, int]]:
    """(pid, ppid) of live processes whose command line contains ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if needle not in cmdline:
                continue
            status = (entry / "status").read_text()
        except OSError:  # exited meanwhile
            continue
        ppid = int(re.search(r"^PPid:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
        found.append((int(entry.name), ppid))
    return found


def cmdline_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_gone(needle: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while processes_with(needle):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def online_cpus() -> list[int]:
    """CPUs this process may run on (the containers' default cpuset on a plain host)."""
    return sorted(os.sched_getaffinity(0))
