"""`nri-pinner run` under systemd's Type=notify (issue 35 item 9): a real process, a real AF_UNIX
datagram socket as $NOTIFY_SOCKET (what PID 1 listens on), the fake runtime on its NRI socket.
READY=1 comes once the plugin is registered and synchronized and never before; the datagrams carry
the main process's pid (NotifyAccess=main); STOPPING=1 at SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from run_process import Run, config_text, start_with, terminate

from nri_pinner.edge.observe import readiness
from nri_pinner.edge.observe.status_server import query
from testkit.fake_runtime import FakeRuntime

CREDS = struct.Struct("iII")  # struct ucred: pid, uid, gid


class NotifySocket:
    """What PID 1 listens on: a datagram socket with SO_PASSCRED (the sender's pid on each message)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.messages: list[tuple[int, list[str]]] = []  # (sender pid, lines)

    def receive(self, timeout: float) -> list[tuple[int, list[str]]]:
        """Every datagram arriving within ``timeout``."""
        deadline = time.monotonic() + timeout
        got = []
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data, ancdata, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(CREDS.size))
            except TimeoutError:
                break
            pid = next(CREDS.unpack(d[:CREDS.size])[0] for level, kind, d in ancdata
                       if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS)
            got.append((pid, data.decode().split("\n")))
        self.messages += got
        return got

    def wait_for(self, line: str, timeout: float = 30.0) -> tuple[int, list[str]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in self.receive(0.2):
                if line in msg[1]:
                    return msg
        raise AssertionError(f"no {line!r} within {timeout}s; got {self.messages}")

    def lines(self) -> list[str]:
        return [line for _, lines in self.messages for line in lines]

    def close(self) -> None:
        self.sock.close()


class RuntimeThread:
    """The fake runtime served from an event loop of its own, while the plugin is another process."""

    def __init__(self, path: Path, synchronize: bool = True) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def make() -> FakeRuntime:
            runtime = FakeRuntime(synchronize=synchronize)
            await runtime.listen(str(path))
            return runtime

        self.runtime = self.call(make())

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def close(self) -> None:
        self.call(self.runtime.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def cleanup() -> Iterator[list[Any]]:
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        terminate(thing) if isinstance(thing, Run) else thing.close()


def start(workdir: Path, notify: str, cleanup: list[Any]) -> Run:
    config = workdir / "config.toml"
    config.write_text(config_text(workdir))
    run = start_with(config, env={"NOTIFY_SOCKET": notify})
    cleanup.append(run)
    run.wait_started(workdir / "inspect.sock")
    return run


def test_ready_only_once_registered_and_synchronized_then_stopping(workdir: Path, cleanup: list[Any]) -> None:
    notify = NotifySocket(str(workdir / "notify.sock"))
    cleanup.append(notify)
    run = start(workdir, notify.address, cleanup)
    # No runtime on the NRI socket: the plugin retries; it says so, and is not ready.
    notify.receive(1.5)
    assert "READY=1" not in notify.lines(), notify.messages
    assert any(line.startswith("STATUS=not connected") and str(workdir / "nri.sock") in line
               for line in notify.lines()), notify.messages
    assert {pid for pid, _ in notify.messages} == {run.process.pid}

    runtime = RuntimeThread(workdir / "nri.sock")
    cleanup.append(runtime)
    pid, lines = notify.wait_for("READY=1")
    assert pid == run.process.pid  # the unit's main process: NotifyAccess=main accepts it
    (status,) = [line for line in lines if line.startswith("STATUS=")]
    assert status.startswith("STATUS=pinning: registered with") and "synchronized" in status, lines
    health = query(str(workdir / "inspect.sock"), "Health")
    assert health["connected"] and health["synchronized"], health
    assert notify.lines().count("READY=1") == 1

    run.signal(signal.SIGTERM)
    pid, lines = notify.wait_for("STOPPING=1")
    assert pid == run.process.pid
    assert run.process.wait(20) == 0


def test_registered_but_not_synchronized_is_not_ready(workdir: Path, cleanup: list[Any]) -> None:
    """A runtime that registers and configures the plugin but never synchronizes it: /readyz's
    "waiting for the runtime's Synchronize", and no READY=1."""
    notify = NotifySocket(str(workdir / "notify.sock"))
    cleanup.append(notify)
    cleanup.append(RuntimeThread(workdir / "nri.sock", synchronize=False))
    start(workdir, notify.address, cleanup)
    deadline = time.monotonic() + 20
    while not query(str(workdir / "inspect.sock"), "Health")["connected"]:
        assert time.monotonic() < deadline, "never connected"
        time.sleep(0.1)
    notify.receive(1.5)
    assert "READY=1" not in notify.lines(), notify.messages
    assert any(line.startswith("STATUS=connected, waiting for the runtime's Synchronize")
               for line in notify.lines()), notify.messages


def test_an_abstract_notify_socket_is_reached(workdir: Path, cleanup: list[Any]) -> None:
    """systemd may name an abstract socket ('@…'), e.g. in a container or a user manager."""
    notify = NotifySocket(f"@nri-pinner-test-{os.getpid()}-{workdir.name}")
    cleanup.append(notify)
    cleanup.append(RuntimeThread(workdir / "nri.sock"))
    run = start(workdir, notify.address, cleanup)
    assert notify.wait_for("READY=1")[0] == run.process.pid


def test_without_notify_socket_nothing_is_sent_and_the_variable_is_not_inherited() -> None:
    env = {"NOTIFY_SOCKET": "/run/systemd/notify", "PATH": "/bin"}
    notifier = readiness.from_env(env)
    assert notifier is not None and notifier.address == "/run/systemd/notify"
    assert env == {"PATH": "/bin"}  # a child process of the plugin cannot speak for the unit
    notifier.close()
    assert readiness.from_env({}) is None
    # systemd's vsock: form and relative paths are not a host unit's: ignored, not an error
    assert readiness.from_env({"NOTIFY_SOCKET": "vsock:2:1234"}) is None
    assert readiness.from_env({"NOTIFY_SOCKET": "notify.sock"}) is None


def test_a_vanished_notify_socket_never_fails_the_service(tmp_path: Path) -> None:
    notifier = readiness.Notifier(str(tmp_path / "gone.sock"))
    assert notifier.send("READY=1") is False
    assert notifier.send("STATUS=x") is False  # logged once, still no exception
    notifier.close()


async def test_announce_sends_ready_once_with_its_status_and_status_on_each_change(tmp_path: Path) -> None:
    notify = NotifySocket(str(tmp_path / "n.sock"))
    states = iter([(False, "a"), (False, "a"), (True, "b"), (True, "b"), (False, "c"), (True, "b")])
    last = (True, "b")

    def state() -> tuple[bool, str]:
        nonlocal last
        last = next(states, last)
        return last

    notifier = readiness.Notifier(notify.address)
    task = asyncio.create_task(readiness.announce(notifier, state, until_ready=0.01, when_ready=0.01))
    await asyncio.sleep(0.3)
    task.cancel()
    notifier.close()
    got = [lines for _, lines in notify.receive(0.2)]
    notify.close()
    assert got == [["STATUS=a"], ["READY=1", "STATUS=b"], ["STATUS=c"], ["STATUS=b"]]
