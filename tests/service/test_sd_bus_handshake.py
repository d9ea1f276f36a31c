"""The first call on a fresh connection to systemd's sd-bus server (systemd_units.connect). The server is
libsystemd's own (sd_bus_server.py); the VM tier asks the real PID 1 (tests/vm/parts/40-deb-unit probe)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from jeepney import HeaderFields, Message, Parser, new_method_call
from jeepney.auth import BEGIN, Authenticator
from sd_bus_server import SdBusServer

from nri_pinner.cli.enable_nri import restart_unit
from nri_pinner.edge.cgroups.systemd_units import SYSTEMD, SystemdUnits
from nri_pinner.engine.cpuset import CPUSet


def restart_call() -> Message:
    msg: Message = new_method_call(SYSTEMD, "RestartUnit", "ss", ("containerd.service", "replace"))
    return msg


@pytest.fixture
def bus_path(short_dir: Path) -> Path:
    return short_dir / "private"


@pytest.fixture
def busy_server(bus_path: Path) -> Iterator[SdBusServer]:
    server = SdBusServer(bus_path, pause=0.05)  # a PID 1 that reaches the connection 50 ms late
    yield server
    server.stop()


def authenticated(path: Path) -> socket.socket:
    """EXTERNAL auth answered with OK; BEGIN not sent yet."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(str(path))
    auth = Authenticator()
    for request in auth:
        sock.sendall(request)
        auth.feed(sock.recv(1024))
    return sock


def replies(sock: socket.socket, parser: Parser, timeout: float) -> list[int]:
    """Reply serials read within ``timeout`` (all that came before the socket went quiet)."""
    sock.settimeout(timeout)
    serials = []
    try:
        while True:
            parser.add_data(sock.recv(65536))
            while (msg := parser.get_next_message()) is not None:
                serials.append(msg.header.fields.get(HeaderFields.reply_serial))
    except TimeoutError:
        return serials


def test_a_call_read_together_with_begin_waits_for_the_next_bytes(busy_server: SdBusServer, bus_path: Path) -> None:
    """Why connect() waits: BEGIN and a call in one write reach the server in one read; the call stays in
    sd-bus's buffer, unanswered, until more bytes arrive (then both are answered)."""
    sock = authenticated(bus_path)
    call = restart_call()  # 212 bytes: with BEGIN, within the 236 the server's first running read takes
    parser = Parser()
    sock.sendall(BEGIN + call.serialise(serial=1))
    assert replies(sock, parser, 1.5) == []
    assert busy_server.calls == 0
    sock.sendall(call.serialise(serial=2))
    assert sorted(replies(sock, parser, 1.5)) == [1, 2]
    sock.close()


@pytest.mark.parametrize("pause", [0.05, 0.0])
def test_every_fresh_connection_has_its_first_call_answered(bus_path: Path, pause: float) -> None:
    """`nri-pinner enable-nri --restart`'s RestartUnit, the first and only call of a fresh connection, 12
    times, then a pool pass (SystemdUnits, as the service after each reconnect): every call answered
    (before connect() waited for BEGIN to be read, most restarts went unanswered against the busy server)."""
    server = SdBusServer(bus_path, pause=pause)
    try:
        for _ in range(12):
            assert restart_unit(str(bus_path), "containerd.service", timeout=2.0).startswith("asked systemd")
        units = SystemdUnits(str(bus_path), timeout=2.0)
        try:
            assert units.agree([("c.scope", CPUSet.parse("1"), CPUSet.parse("0"))]) == {}
        finally:
            units.close()
        assert server.calls == 13
    finally:
        server.stop()
