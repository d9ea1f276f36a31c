"""The shipped logrotate file (packaging/deb/logrotate, /etc/logrotate.d/nri-pinner in the .deb) run by the
real logrotate against a real `nri-pinner run`: the log is rotated and the process, told by the file's
postrotate, reopens log.file (issue 35 item 5)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from run_process import REPO, start, terminate

from nri_pinner.config import InspectSettings
from nri_pinner.edge.instance_lock import lock_path

SHIPPED = REPO / "packaging" / "deb" / "logrotate"
LOG = "/var/log/nri-pinner.log"


def test_the_shipped_file_names_the_suggested_log_and_the_default_lock() -> None:
    text = SHIPPED.read_text()
    assert text.count(f"{LOG} {{") == 1
    assert f"lock={lock_path(InspectSettings().socket)}\n" in text
    assert "postrotate" in text and "systemctl kill --kill-whom=main --signal=HUP nri-pinner.service" in text
    assert f'"{LOG}"' in (REPO / "nri_pinner" / "cli" / "install.py").read_text()  # the path `install` suggests
    conffiles = (REPO / "packaging" / "deb" / "conffiles").read_text().split()
    assert "/etc/logrotate.d/nri-pinner" in conffiles


@pytest.mark.skipif(not shutil.which("logrotate"), reason="logrotate is not installed (apt-get install logrotate)")
def test_logrotate_rotates_and_the_running_plugin_reopens(workdir: Path) -> None:
    log = workdir / "nri-pinner.log"
    run = start(workdir, log={"file": str(log)})
    try:
        run.wait_started(workdir / "inspect.sock")
        conf = workdir / "logrotate.conf"
        conf.write_text(SHIPPED.read_text().replace(LOG, str(log))
                        .replace(str(lock_path(InspectSettings().socket)), str(lock_path(workdir / "inspect.sock"))))
        res = subprocess.run(["logrotate", "-f", "-s", str(workdir / "state"), str(conf)], capture_output=True,
                             text=True, check=False)
        assert res.returncode == 0, res.stderr
        rotated = workdir / "nri-pinner.log.1"  # delaycompress: the newest rotation stays plain
        assert '"starting"' in rotated.read_text()
        deadline = time.monotonic() + 10
        while "reopened" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, f"not reopened; rotated:\n{rotated.read_text()}"
            time.sleep(0.05)
        assert run.process.poll() is None
        assert "reopened" not in rotated.read_text()
        assert run.stop() == 0
    finally:
        terminate(run)
