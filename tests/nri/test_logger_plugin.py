"""The example logger plugin: in process and as a real process (external and pre-installed mode)."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examples.logger import EventLogger
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub import Stub
from testkit.fake_runtime import (
    CONTAINERD_1_7_24,
    CONTAINERD_2_3_0,
    FakeRuntime,
    PluginConnection,
    RuntimeProfile,
    running_stub,
)

STARTUP_TIMEOUT = 30.0
# argv: FD PROGRAM ARGS...; makes FD the child's fd 3 (as containerd's ExtraFiles[0]) and execs PROGRAM.
MOVE_TO_FD3_AND_EXEC = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "if fd != 3:\n"
    "    os.dup2(fd, 3)\n"
    "    os.close(fd)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)  # a cold interpreter on a busy 2-CPU machine

REPO = Path(__file__).resolve().parents[2]  # examples/ is a top-level folder, not installed


@pytest.fixture
def workdir() -> Iterator[Path]:
    directory = tempfile.mkdtemp(prefix="nrilog-", dir="/tmp")  # short: unix socket path limit
    yield Path(directory)
    shutil.rmtree(directory, ignore_errors=True)


POD = api.PodSandbox(id="pod-a", name="web", namespace="default", uid="u-1")
CTR = api.Container(id="ctr-a", pod_sandbox_id="pod-a", name="nginx")


async def lifecycle(conn: PluginConnection) -> None:
    await conn.state_change(api.RUN_POD_SANDBOX, POD)
    await conn.create_container(api.CreateContainerRequest(pod=POD, container=CTR))
    await conn.state_change(api.START_CONTAINER, POD, CTR)
    await conn.update_container(api.UpdateContainerRequest(pod=POD, container=CTR))
    await conn.stop_container(api.StopContainerRequest(pod=POD, container=CTR))
    await conn.state_change(api.REMOVE_CONTAINER, POD, CTR)


EXPECTED = ["RunPodSandbox", "CreateContainer", "StartContainer", "UpdateContainer", "StopContainer",
            "RemoveContainer"]


def read_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("profile", [CONTAINERD_1_7_24, CONTAINERD_2_3_0])
async def test_logs_every_event_in_order(workdir: Path, profile: RuntimeProfile) -> None:
    out = io.StringIO()
    path = str(workdir / "nri.sock")
    async with FakeRuntime(profile, pods=[POD], containers=[CTR]) as runtime:
        await runtime.listen(path)
        async with running_stub(Stub(EventLogger(out), name="logger", idx="50", socket_path=path, env={})):
            conn = await runtime.wait_ready()
            await lifecycle(conn)
            # every event the runtime knows except adjustment validation (the logger is no validator)
            assert conn.events == profile.valid_events & ~0x2000
    lines = read_lines(out.getvalue())
    assert [line["event"] for line in lines] == ["Connect", "Configure", "Synchronize", *EXPECTED, "Close"]
    assert lines[1]["runtime_version"] == profile.runtime_version
    assert [p["id"] for p in lines[2]["pods"]] == ["pod-a"]
    assert lines[4]["container"]["id"] == "ctr-a" and lines[4]["pod"]["uid"] == "u-1"
    assert lines[5]["container"]["name"] == "nginx"


async def wait_exit(process: asyncio.subprocess.Process) -> tuple[int, str]:
    _, stderr = await asyncio.wait_for(process.communicate(), STARTUP_TIMEOUT)
    assert process.returncode is not None
    return process.returncode, stderr.decode(errors="replace")


async def test_runs_as_external_plugin_process(workdir: Path) -> None:
    path, log = str(workdir / "nri.sock"), workdir / "events.jsonl"
    async with FakeRuntime(CONTAINERD_2_3_0) as runtime:
        await runtime.listen(path)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "examples.logger", "--socket", path, "--log", str(log),
            "--idx", "51", stderr=asyncio.subprocess.PIPE, cwd=REPO,
        )
        try:
            conn = await runtime.wait_ready(STARTUP_TIMEOUT)
            assert (conn.name, conn.idx) == ("logger", "51")
            await lifecycle(conn)
        finally:
            process.send_signal(signal.SIGTERM)
        code, stderr = await wait_exit(process)
    assert code == 0, stderr
    events = [line["event"] for line in read_lines(log.read_text())]
    assert events[3:9] == EXPECTED


async def test_runs_as_preinstalled_plugin_with_only_nri_env(workdir: Path) -> None:
    log = workdir / "events.jsonl"
    async with FakeRuntime(CONTAINERD_1_7_24, config="log-level=debug\n") as runtime:
        plugin_end: socket.socket = runtime.socketpair()
        fd = plugin_end.fileno()
        # Like containerd: fd 3 is the socket, the environment holds only the three NRI variables.
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", MOVE_TO_FD3_AND_EXEC, str(fd),
            sys.executable, "-m", "examples.logger", "--log", str(log),
            env={"NRI_PLUGIN_NAME": "prelog", "NRI_PLUGIN_IDX": "60", "NRI_PLUGIN_SOCKET": "3"},
            pass_fds=(fd,), stderr=asyncio.subprocess.PIPE, cwd=REPO,
        )
        plugin_end.close()
        conn = await runtime.wait_ready(STARTUP_TIMEOUT)
        assert (conn.name, conn.idx) == ("prelog", "60")
        await lifecycle(conn)
        conn.close("runtime stopped")  # containerd never relaunches: the plugin must exit
        code, stderr = await wait_exit(process)
    assert code == 1 and "exiting" in stderr
    lines = read_lines(log.read_text())
    assert lines[1]["config"] == "log-level=debug\n"
    assert [line["event"] for line in lines][3:] == [*EXPECTED, "Close"]
