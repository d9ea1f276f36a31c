"""A stand-in for systemd's private D-Bus socket, for host tests: systemd cannot run as PID 1 on this
machine (tests/vm proves the real one in a guest). It speaks the wire protocol for real (EXTERNAL
auth, jeepney's message parser) and answers each call as `answer` says: None = success, a string =
that D-Bus error name, "silence" = no reply, "garbage" = bytes that are no D-Bus message."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jeepney import HeaderFields, MessageType, Parser, new_error, new_method_return


class DBusPeer:
    def __init__(self, path: Path, answer: Callable[[str, list[Any]], str | None] = lambda unit, props: None) -> None:
        self.path, self.answer = path, answer
        self.calls: list[tuple[str, str, bool, list[Any]]] = []  # (member, unit, runtime, properties)
        self.connections = 0
        self.batches: list[int] = []  # calls read per recv (how pipelined the client is)
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(path))
        self._srv.listen(4)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        with conn:
            rest = b""
            while True:  # the auth lines: "\0AUTH EXTERNAL <hex uid>" (answered OK), … "BEGIN"
                while b"\r\n" not in rest:
                    data = conn.recv(4096)
                    if not data:
                        return
                    rest += data
                line, rest = rest.split(b"\r\n", 1)
                if line.lstrip(b"\0").startswith(b"AUTH"):
                    conn.sendall(b"OK 0123456789abcdef0123456789abcdef\r\n")
                elif line == b"BEGIN":
                    break
            parser = Parser()
            parser.add_data(rest)
            while True:
                msgs = list(iter(parser.get_next_message, None))
                if msgs:
                    self.batches.append(len(msgs))
                for msg in msgs:
                    self._reply(conn, msg)
                data = conn.recv(65536)
                if not data:
                    return
                parser.add_data(data)

    def _reply(self, conn: socket.socket, msg: Any) -> None:
        if msg.header.message_type != MessageType.method_call:
            return
        member = msg.header.fields[HeaderFields.member]
        if member == "Hello":
            conn.sendall(new_method_return(msg, "s", (":1.42",)).serialise(serial=1))
            return
        unit, runtime, props = msg.body
        self.calls.append((member, unit, runtime, props))
        verdict = self.answer(unit, props)
        if verdict == "silence":
            return
        if verdict == "garbage":  # not D-Bus at all
            conn.sendall(b"x" * 64)
            return
        reply = (new_method_return(msg) if verdict is None
                 else new_error(msg, verdict, "s", (f"refused {unit}",)))
        conn.sendall(reply.serialise(serial=len(self.calls) + 1))

    def close(self) -> None:
        self._srv.close()
