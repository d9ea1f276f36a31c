"""One `nri-pinner run` per runtime (issue 35): two instances with DIFFERENT inspection sockets would both
register with the same runtime and both claim every container's cpuset. Real processes; the node-wide
lock lives under $NRI_PINNER_INSTALL_ROOT/run/nri-pinner here (/run/nri-pinner on a node)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from run_process import Run, config_text, start_with

from nri_pinner.edge.instance_lock import RUN_DIR, runtime_lock_path

NOISE = ("Traceback", "Event loop is closed", "never awaited")


def start(workdir: Path, name: str, nri_socket: Path, runs: list[Run]) -> Run:
    """An instance with its own inspection socket, checkpoint and config, on ``nri_socket``."""
    own = workdir / name
    own.mkdir()
    config = own / "config.toml"
    config.write_text(config_text(own, nri={"socket": str(nri_socket), "reconnect_max_seconds": 0.5}))
    run = start_with(config, env={"NRI_PINNER_INSTALL_ROOT": str(workdir / "host")})
    runs.append(run)
    return run


def refusal(run: Run) -> str:
    assert run.process.wait(20) == 2
    _, err = run.output()
    lines = [line for line in err.splitlines() if not line.startswith("{")]
    assert len(lines) == 1, err
    assert not any(n in err for n in NOISE), err
    return lines[0]


def test_a_second_run_on_the_same_runtime_is_refused_whatever_its_inspection_socket(
        workdir: Path, runs: list[Run]) -> None:
    nri = workdir / "nri.sock"
    first = start(workdir, "first", nri, runs)
    first.wait_started(workdir / "first" / "inspect.sock")
    second = start(workdir, "second", nri, runs)
    line = refusal(second)
    assert f"NRI socket {nri}" in line and f"pid {first.process.pid}" in line, line
    lock = runtime_lock_path(nri, str(workdir / "host"))
    assert str(lock) in line and lock.read_text() == f"{first.process.pid}\n"
    # the refused one left nothing: no inspection socket, its inspection lock free for a next instance
    assert not (workdir / "second" / "inspect.sock").exists()
    assert first.process.poll() is None
    assert first.stop() == 0
    assert lock.read_text() == ""  # emptied at exit: a pid in it belongs to a live holder
    third = start(workdir, "third", nri, runs)
    third.wait_started(workdir / "third" / "inspect.sock")
    assert third.stop() == 0


def test_one_runtime_reached_by_two_spellings_of_its_socket_is_one_runtime(workdir: Path, runs: list[Run]) -> None:
    """/var/run is /run on a node: a link in the path must not make two runtimes of one."""
    (workdir / "run" / "nri").mkdir(parents=True)
    (workdir / "var").mkdir()
    (workdir / "var" / "run").symlink_to(workdir / "run")
    first = start(workdir, "first", workdir / "var" / "run" / "nri" / "nri.sock", runs)
    first.wait_started(workdir / "first" / "inspect.sock")
    line = refusal(start(workdir, "second", workdir / "run" / "nri" / "nri.sock", runs))
    assert f"NRI socket {workdir / 'run' / 'nri' / 'nri.sock'}" in line, line


def test_instances_on_different_runtimes_both_run(workdir: Path, runs: list[Run]) -> None:
    one = start(workdir, "one", workdir / "nri-a.sock", runs)
    two = start(workdir, "two", workdir / "nri-b.sock", runs)
    one.wait_started(workdir / "one" / "inspect.sock")
    two.wait_started(workdir / "two" / "inspect.sock")
    assert one.stop() == 0 and two.stop() == 0


def test_a_killed_holder_does_not_block_the_next_instance(workdir: Path, runs: list[Run]) -> None:
    nri = workdir / "nri.sock"
    first = start(workdir, "first", nri, runs)
    first.wait_started(workdir / "first" / "inspect.sock")
    first.signal(signal.SIGKILL)
    first.process.wait(20)
    second = start(workdir, "second", nri, runs)
    second.wait_started(workdir / "second" / "inspect.sock")
    assert runtime_lock_path(nri, str(workdir / "host")).read_text() == f"{second.process.pid}\n"
    assert second.stop() == 0


def test_the_lock_is_under_the_runtime_directory_keyed_on_the_canonical_socket(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    monkeypatch.delenv("NRI_PINNER_INSTALL_ROOT", raising=False)
    default = runtime_lock_path("/var/run/nri/nri.sock")
    assert default.parent == Path(RUN_DIR)
    if os.path.realpath("/var/run") == "/run":
        assert default == Path("/run/nri-pinner/nri-run-nri-nri.sock.lock")
    # one name per path: '-' in a directory name is escaped, not confused with '/'
    assert runtime_lock_path("/a-b/c") != runtime_lock_path("/a/b-c")
    monkeypatch.setenv("NRI_PINNER_INSTALL_ROOT", str(tmp_path))
    assert runtime_lock_path("/var/run/nri/nri.sock").parent == tmp_path / "run" / "nri-pinner"
    assert len(runtime_lock_path("/" + "d" * 300).name) < 255


def test_a_stop_during_start_up_ends_the_instance_cleanly(workdir: Path, runs: list[Run]) -> None:
    """SIGTERM as soon as the instance has logged "starting" (its locks taken, the service not yet
    built): systemd's stop of a unit still starting. The signal waits until the service handles it,
    then the instance ends as after any stop: exit 0, no inspection socket, the runtime lock emptied.
    Before the signals were blocked from the start, this ended with -15 and both files left behind."""
    nri = workdir / "nri.sock"
    run = start(workdir, "one", nri, runs)
    assert run.process.stderr is not None
    for line in run.process.stderr:
        if line.startswith("{") and json.loads(line).get("event") == "starting":
            break
    else:
        raise AssertionError(f"ended {run.process.wait(20)} before it logged 'starting'")
    run.signal(signal.SIGTERM)
    assert run.process.wait(20) == 0, run.output()[1]
    _, err = run.output()
    assert not any(n in err for n in NOISE), err
    assert not (workdir / "one" / "inspect.sock").exists()
    assert runtime_lock_path(nri, str(workdir / "host")).read_text() == ""
