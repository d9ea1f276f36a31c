"""The unit's readiness (issue 35 item 9): Type=notify, answered by `run` itself (tests/service/
test_sd_notify.py), with a start timeout that is finite and documented where operators look."""

from __future__ import annotations

import re
from pathlib import Path

from nri_pinner.cli.man_and_completions import man_page

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "nri-pinner.service"


def unit_values(key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in UNIT.read_text().splitlines() if line.startswith(f"{key}=")]


def test_the_unit_waits_for_the_plugins_own_ready_from_its_main_process() -> None:
    assert unit_values("Type") == ["notify"]
    # only the main process (the venv's python: ExecStart execs it, no wrapper shell) may say READY
    assert unit_values("NotifyAccess") == ["main"]
    (exec_start,) = unit_values("ExecStart")
    assert exec_start.startswith("/usr/lib/nri-pinner/venv/bin/nri-pinner run ")


def test_a_start_that_never_gets_ready_fails_and_is_retried() -> None:
    """No runtime (NRI off, containerd down): infinity would hold a boot's multi-user.target and dpkg's
    try-restart for ever; a finite timeout fails the start and Restart=on-failure tries again."""
    (timeout,) = unit_values("TimeoutStartSec")
    found = re.fullmatch(r"(\d+)s", timeout)
    assert found and 30 <= int(found.group(1)) <= 300, timeout
    assert unit_values("Restart") == ["on-failure"]  # a start timeout is a failure systemd restarts
    readme = (REPO / "docs" / "install.md").read_text()  # the README's install page
    assert f"`TimeoutStartSec={timeout}`" in readme and "`Type=notify`" in readme
    assert f"TimeoutStartSec={timeout}" in man_page().replace("\\fB", "").replace("\\fR", "")
    assert "NOTIFY_SOCKET" in man_page()
