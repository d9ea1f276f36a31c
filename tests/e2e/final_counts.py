"""Each plugin instance's final counts, taken when it stops (issue 45): the cgroup writer's counters
(`health.cgroup_writes`: unit_calls, unit_failed, ...), the reconciler's drift repairs, and the drifts
the scenario caused meanwhile (`PrivateContainerd.drifted`: written on purpose by write_cgroup_cpuset, or
seen by a sampler after its triggers, tests/vm_guest/test_window_guest.py). One JSON line per
instance to $NRI_PINNER_E2E_FINAL_COUNTS (the VM tier's part 30 sets it; unset: nothing is taken);
tests/vm/final_counts.py judges them on the host.

Taken generically: Pinner.stop, `preinstalled`'s exit, and the `containerd` fixture's teardown for a
plugin a test left running. A plugin the test killed has no status left to read: its line says so.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .harness import PrivateContainerd
    from .pinner import Pinner

ENV = "NRI_PINNER_E2E_FINAL_COUNTS"
REPAIRED_EVENT = "cpuset drift repaired"
_live: list[Pinner] = []


def started(pinner: Pinner) -> None:
    if os.environ.get(ENV):
        _live.append(pinner)


def record_live(runtime: PrivateContainerd) -> None:
    """Before the fixture stops what a test left running on ``runtime``."""
    for pinner in [p for p in _live if p.runtime is runtime]:
        record(pinner)


def record(pinner: Pinner) -> None:
    path = os.environ.get(ENV)
    if not path or not any(p is pinner for p in _live):
        return
    _live[:] = [p for p in _live if p is not pinner]
    entry = counts(pinner)
    # its whole log beside the counts: what led to each repair, or to a systemd call left unanswered (issue 45)
    if entry.get("repairs") or (entry.get("cgroup_writes") or {}).get("unit_failed"):
        text = _log_text(pinner) or ""
        logs = Path(path).parent / "plugin-logs"
        logs.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", entry["test"].rsplit("::", 1)[-1])[:100] or "unknown"
        target = logs / f"{name}-{len(list(logs.iterdir()))}.log"
        target.write_text(text)
        entry["log"] = str(target.relative_to(Path(path).parent))
    with open(path, "a") as out:
        out.write(json.dumps(entry, sort_keys=True) + "\n")


def counts(pinner: Pinner) -> dict[str, Any]:
    drifted = pinner.runtime.drifted[pinner.drift_mark:]
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]  # without " (call)"/" (teardown)"
    entry: dict[str, Any] = {"test": test, "runtime": pinner.runtime.runtime_key, "config": str(pinner.config_path),
                             "pool_on_qos_slices": configured(pinner), "drifts_written": len(drifted)}
    exited = pinner.process is not None and pinner.process.proc.poll() is not None
    try:
        if exited:  # its socket path may be a later instance's by now (same workdir)
            raise RuntimeError(f"the plugin exited ({pinner.process.proc.returncode}) before its counts were read")
        health = pinner.status()["health"]
    except Exception as exc:  # stopped or killed by the test: no counters to read
        entry["status_error"] = repr(exc)[:300]
    else:
        entry["reconcile_repairs"] = health.get("reconcile_repairs")
        entry["cgroup_writes"] = health.get("cgroup_writes")  # None: cgroup writes off
    repaired = _repairs_logged(pinner)
    if repaired is not None:
        written = {cid[:12] for cid in drifted}
        entry["repaired_logged"] = len(repaired)
        entry["repaired_never_drifted"] = sorted({r["container_id"] for r in repaired} - written)
        entry["repairs"] = repaired[:20]  # what each repair saw: a false one shows here (issue 45)
    return entry


def configured(pinner: Pinner) -> bool:
    """Its config holds the shared pool on the QoS slices."""
    try:
        reconcile = tomllib.loads(pinner.config_path.read_text()).get("reconcile", {})
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return reconcile.get("systemd_pool_on_qos_slices") is True


def _repairs_logged(pinner: Pinner) -> list[dict[str, str]] | None:
    """The plugin's `cpuset drift repaired` lines (JSON logs), their telling fields; None: no log."""
    text = _log_text(pinner)
    if text is None:
        return None
    found = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == REPAIRED_EVENT:
            found.append({k: str(entry.get(k, "")) for k in ("container_id", "container", "actual", "desired", "path",
                                                              "timestamp")})
    return found


def _log_text(pinner: Pinner) -> str | None:
    log = pinner.log_file or (pinner.process.log_path if pinner.process is not None else None)
    try:
        return log.read_text(errors="replace") if log is not None else None
    except OSError:
        return None
