"""systemd/nri-pinner.service: verifies cleanly, is hardened (exposure score asserted), grants only the
writes the service makes, and says what the other install modes rely on. PID 1 here is not systemd:
only offline systemd-analyze is used; tests/vm/test_deb_unit.py runs the packaged unit under a real
systemd (257, in a QEMU guest) and measures its exposure there."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "nri-pinner.service"
MAX_EXPOSURE = 3.0
SYSTEMD_UNIT_DIR = Path("/usr/lib/systemd/system")

analyze = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(analyze is None, reason="systemd-analyze not installed (Debian package systemd)")


def unit_values(key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in UNIT.read_text().splitlines() if line.startswith(f"{key}=")]


def exec_start_binary() -> str:
    (exec_start,) = unit_values("ExecStart")
    return exec_start.split()[0]


def test_unit_runs_the_packaged_daemon_with_the_packaged_config() -> None:
    assert unit_values("ExecStart") == [
        "/usr/lib/nri-pinner/venv/bin/nri-pinner run --config /etc/nri-pinner/config.toml"
    ]
    assert unit_values("Restart") == ["on-failure"]
    # A bad config is reported once by the pre-start check (every error, with lines) and not retried:
    # exit status 2 is the CLI's documented usage/config error.
    assert unit_values("ExecStartPre") == [
        "/usr/lib/nri-pinner/venv/bin/nri-pinner config --check /etc/nri-pinner/config.toml --quiet"
    ]
    assert unit_values("RestartPreventExitStatus") == ["2"]
    assert unit_values("After") == ["containerd.service"] and unit_values("Wants") == ["containerd.service"]
    assert unit_values("StateDirectory") == ["nri-pinner"] and unit_values("RuntimeDirectory") == ["nri-pinner"]
    assert unit_values("CapabilityBoundingSet") == [""]
    # `nri-pinner install` writes this marker; the unit must not start next to a pre-installed plugin.
    assert unit_values("ConditionPathExists") == ["!/etc/nri-pinner/pre-installed"]


def test_the_sandbox_grants_only_the_writes_the_service_makes() -> None:
    """Writable: its state and runtime directories (StateDirectory/RuntimeDirectory) and the cgroup fs
    (containers' cpuset files). The sockets it connects to (NRI, CRI, systemd's /run/systemd/private
    for the scopes' AllowedCPUs) need no writable mount: connect() checks the socket's own mode, so
    /run/containerd, /run/nri and /run/systemd stay read-only (writable, they would let the process
    rewrite runtime state or install units). No capability: the cpuset files are the owner's (root)
    to write, and systemd's private bus grants a uid-0 peer without one (checked in the VM tier)."""
    assert unit_values("ProtectSystem") == ["strict"]
    assert unit_values("ReadWritePaths") == ["/sys/fs/cgroup"]
    assert unit_values("ProtectControlGroups") == ["no"]
    assert unit_values("CapabilityBoundingSet") == [""] and unit_values("AmbientCapabilities") == [""]
    assert unit_values("NoNewPrivileges") == ["yes"]
    (families,) = unit_values("RestrictAddressFamilies")
    assert "AF_UNIX" in families.split()


@needs_analyze
def test_systemd_analyze_verify_is_clean(tmp_path: Path) -> None:
    """Verify in a scratch root holding this machine's unit files, the unit, and an executable at the
    ExecStart path (the real one is checked in the installed root by test_deb_package). --man=no: the
    man:nri-pinner(1) reference is shipped by the package (test_deb_package), not installed here."""
    if not (SYSTEMD_UNIT_DIR / "sysinit.target").exists():
        pytest.skip(f"{SYSTEMD_UNIT_DIR} has no sysinit.target to verify against")
    shutil.copytree(SYSTEMD_UNIT_DIR, tmp_path / "usr/lib/systemd/system", symlinks=True)
    (tmp_path / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, tmp_path / "etc/systemd/system" / UNIT.name)
    binary = tmp_path / exec_start_binary().lstrip("/")
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    res = subprocess.run(
        [str(analyze), "verify", "--man=no", f"--root={tmp_path}", UNIT.name],
        capture_output=True, text=True, check=False,
    )
    assert (res.returncode, res.stdout + res.stderr) == (0, "")


@needs_analyze
def test_exposure_score_is_at_most_3(tmp_path: Path) -> None:
    res = subprocess.run(
        [str(analyze), "security", "--offline=true", "--no-pager", str(UNIT)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", res.stdout + res.stderr)
    assert found, f"no exposure level in systemd-analyze output:\n{res.stdout}\n{res.stderr}"
    score = float(found.group(1))
    print(f"systemd-analyze security --offline=true: exposure {score}")
    assert score <= MAX_EXPOSURE, res.stdout
