"""`nri-pinner run` as an operator meets it, as a real process: one instance per inspection socket, a
metrics address it cannot bind, SIGHUP (logrotate), and the files it leaves behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from run_process import REPO, Run, json_lines, start

from nri_pinner.cli.main import main

NOISE = ("Traceback", "Event loop is closed", "never awaited")


def reachable(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def wait_until(predicate: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(0.05)
    return False


# ------------------------------------------------------------------------------- one instance (item 1)

def test_a_second_run_on_the_same_inspection_socket_is_refused(workdir: Path, runs: list[Run]) -> None:
    sock = workdir / "inspect.sock"
    first = start(workdir, "first.toml")
    runs.append(first)
    first.wait_started(sock)
    inode = sock.stat().st_ino
    # Another config (its own checkpoint and NRI socket), the same inspection socket.
    second = start(workdir, "second.toml", state={"checkpoint": str(workdir / "cp2.json")},
                   nri={"socket": str(workdir / "nri2.sock")})
    runs.append(second)
    assert second.process.wait(20) == 2
    _, err = second.output()
    lines = [line for line in err.splitlines() if not line.startswith("{")]
    assert len(lines) == 1, err
    assert str(sock) in lines[0] and f"pid {first.process.pid}" in lines[0], lines[0]
    assert not any(n in err for n in NOISE), err
    # The first instance still serves its socket: the same file, answering.
    assert sock.stat().st_ino == inode and reachable(sock)
    assert first.process.poll() is None
    assert main(["status", "--socket", str(sock)]) == 3  # reached: not connected to a runtime (none here)
    assert first.stop() == 0
    assert not sock.exists()


def test_exit_leaves_a_socket_file_it_does_not_own(workdir: Path, runs: list[Run]) -> None:
    sock = workdir / "inspect.sock"
    run = start(workdir)
    runs.append(run)
    run.wait_started(sock)
    # Someone else (an instance that knows no lock) replaced the socket file meanwhile.
    sock.unlink()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
        other.bind(str(sock))
        other.listen()
        assert run.stop() == 0
        assert sock.exists() and reachable(sock)


def test_a_socket_served_by_an_instance_without_the_lock_is_refused(workdir: Path, runs: list[Run]) -> None:
    sock = workdir / "inspect.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
        other.bind(str(sock))
        other.listen()
        run = start(workdir)
        runs.append(run)
        assert run.process.wait(20) == 2
        _, err = run.output()
        assert "already serves the inspection socket" in err and str(sock) in err, err
        assert sock.exists() and reachable(sock)


def test_a_stale_socket_and_lock_of_a_killed_instance_are_taken_over(workdir: Path, runs: list[Run]) -> None:
    sock = workdir / "inspect.sock"
    first = start(workdir)
    runs.append(first)
    first.wait_started(sock)
    first.process.kill()
    first.process.wait(10)
    assert sock.exists()  # SIGKILL: nothing cleaned up
    second = start(workdir)
    runs.append(second)
    second.wait_started(sock)
    assert wait_until(lambda: reachable(sock))
    assert second.stop() == 0


# ------------------------------------------------------------------------------- metrics bind (item 4)

def test_a_metrics_port_in_use_is_one_line_and_exit_2(workdir: Path, runs: list[Run]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = start(workdir, metrics={"enabled": True, "address": "127.0.0.1", "port": port},
                    log={"file": str(workdir / "log")})
        runs.append(run)
        assert run.process.wait(20) == 2
    _, err = run.output()
    assert len(err.strip().splitlines()) == 1, err
    assert f"127.0.0.1:{port}" in err and "Address already in use" in err, err
    assert not any(n in err for n in NOISE)
    logged = json_lines((workdir / "log").read_text())
    assert any(e.get("event") == "cannot start" and str(port) in e.get("error", "") for e in logged), logged
    assert not (workdir / "inspect.sock").exists()  # nothing left behind


def test_an_unresolvable_metrics_address_is_refused_before_starting(workdir: Path, runs: list[Run]) -> None:
    run = start(workdir, metrics={"enabled": True, "address": "no-such-host.invalid", "port": 1})
    runs.append(run)
    assert run.process.wait(20) == 2
    _, err = run.output()
    assert "metrics.address" in err and "no-such-host.invalid" in err, err
    assert not any(n in err for n in NOISE)


# ------------------------------------------------------------------------------------- SIGHUP (item 5)

def test_sighup_reopens_the_log_file(workdir: Path, runs: list[Run]) -> None:
    log = workdir / "nri-pinner.log"
    run = start(workdir, log={"file": str(log)})
    runs.append(run)
    run.wait_started(workdir / "inspect.sock")
    rotated = workdir / "nri-pinner.log.1"
    log.rename(rotated)  # what logrotate does before its postrotate
    run.signal(signal.SIGHUP)
    assert wait_until(lambda: log.exists() and "reopened" in log.read_text()), "no new log file"
    assert run.process.poll() is None
    [line] = [json.loads(t) for t in log.read_text().splitlines() if "reopened" in t]
    assert line["file"] == str(log) and line["level"] == "info"
    before = rotated.read_text()
    assert run.stop() == 0
    assert rotated.read_text() == before  # nothing more went to the rotated file
    assert "stopping" in log.read_text() or log.read_text().count("\n") >= 1


def test_sighup_without_a_log_file_is_logged_and_survived(workdir: Path, runs: list[Run]) -> None:
    run = start(workdir)
    runs.append(run)
    run.wait_started(workdir / "inspect.sock")
    run.signal(signal.SIGHUP)
    time.sleep(0.5)
    assert run.process.poll() is None
    assert run.stop() == 0
    _, err = run.output()
    assert any("SIGHUP" in e.get("event", "") for e in json_lines(err)), err


# --------------------------------------------------------------------------------- no config (item 8)

@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_run_without_a_config_file_says_it_runs_on_the_embedded_defaults() -> None:
    """`nri-pinner run` with no --config and no /etc/nri-pinner/config.toml, in a private mount namespace whose
    /run and /var/lib are empty tmpfs (the defaults' sockets and state stay off this host)."""
    script = ("mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/lib && "
              "{ [ ! -d /etc/nri-pinner ] || mount -t tmpfs tmpfs /etc/nri-pinner; } && "
              'exec "$0" -m nri_pinner run')
    env = {k: v for k, v in os.environ.items() if not k.startswith("NRI_")}
    process = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                                sys.executable], stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    assert process.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr or ()), daemon=True)
    reader.start()
    try:
        assert wait_until(lambda: any('"starting"' in line for line in lines), 30), "".join(lines)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(20)
        reader.join(10)
        process.stderr.close()
    events = json_lines("".join(lines))
    [start] = [e for e in events if e["event"] == "starting"]
    assert start["config"] == "<embedded defaults>", start
    [note] = [e for e in events if "embedded defaults" in e["event"]]
    assert note["missing"] == "/etc/nri-pinner/config.toml"
