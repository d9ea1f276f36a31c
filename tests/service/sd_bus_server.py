"""systemd's own D-Bus server code (libsystemd's sd-bus and sd-event, through ctypes) on a unix socket,
set up as PID 1 sets up a connection to /run/systemd/private (systemd v257 src/core/dbus.c:647-745,
`bus_on_connection`: sd_bus_new, sd_bus_set_fd, sd_bus_set_server, sd_bus_start, sd_bus_attach_event).
Every method call is answered with an empty method return. Not a model of systemd: its server-side
handshake and event handling are the real library's; what PID 1 does with a call is not here.

``pause``: seconds the server thread sleeps before each turn of its loop, as a PID 1 busy elsewhere
(the VM tier, under TCG) reaches a connection late. libsystemd0 is on every Debian host (apt needs it).
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

Ptr = ctypes.c_void_p
Handler = ctypes.CFUNCTYPE(ctypes.c_int, Ptr, Ptr, Ptr)
METHOD_CALL = 1  # SD_BUS_MESSAGE_METHOD_CALL


class Id128(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint8 * 16)]


def library() -> Any:
    lib = ctypes.CDLL("libsystemd.so.0", use_errno=True)
    lib.sd_event_new.argtypes = [ctypes.POINTER(Ptr)]
    lib.sd_event_run.argtypes = [Ptr, ctypes.c_uint64]
    lib.sd_event_unref.argtypes = [Ptr]
    lib.sd_bus_new.argtypes = [ctypes.POINTER(Ptr)]
    lib.sd_bus_set_fd.argtypes = [Ptr, ctypes.c_int, ctypes.c_int]
    lib.sd_bus_set_server.argtypes = [Ptr, ctypes.c_int, Id128]
    lib.sd_bus_start.argtypes = [Ptr]
    lib.sd_bus_attach_event.argtypes = [Ptr, Ptr, ctypes.c_int64]
    lib.sd_bus_add_filter.argtypes = [Ptr, Ptr, Handler, Ptr]
    lib.sd_bus_message_get_type.argtypes = [Ptr, ctypes.POINTER(ctypes.c_uint8)]
    lib.sd_bus_reply_method_return.argtypes = [Ptr, ctypes.c_char_p]
    lib.sd_bus_close_unref.argtypes = [Ptr]
    return lib


class SdBusServer:
    """Serves ``path`` on a thread until :meth:`stop`; ``calls`` counts the method calls answered."""

    def __init__(self, path: Path, pause: float = 0.0) -> None:
        self.lib = library()
        self.pause, self.calls = pause, 0
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(16)
        self.listener.setblocking(False)
        self._stopping = threading.Event()
        self._handler = Handler(self._on_message)  # kept: libsystemd holds the pointer
        self._thread = threading.Thread(target=self._serve, name="sd-bus-server", daemon=True)
        self._thread.start()

    def _on_message(self, message: int | None, _userdata: int | None, _error: int | None) -> int:
        kind = ctypes.c_uint8()
        self.lib.sd_bus_message_get_type(message, ctypes.byref(kind))
        if kind.value != METHOD_CALL:
            return 0
        self.calls += 1
        return int(self.lib.sd_bus_reply_method_return(message, None) >= 0)

    def _serve(self) -> None:
        lib = self.lib
        event = Ptr()
        assert lib.sd_event_new(ctypes.byref(event)) >= 0
        buses: list[Ptr] = []
        try:
            while not self._stopping.is_set():
                time.sleep(self.pause)
                try:
                    conn, _ = self.listener.accept()
                except BlockingIOError:
                    pass
                else:
                    buses.append(self._attach(conn, event))
                lib.sd_event_run(event, 5_000)  # µs: the accept above gets its turn
        finally:
            for bus in buses:
                lib.sd_bus_close_unref(bus)
            lib.sd_event_unref(event)

    def _attach(self, conn: socket.socket, event: Ptr) -> Ptr:
        lib, bus = self.lib, Ptr()
        fd = conn.detach()
        os.set_blocking(fd, False)
        assert lib.sd_bus_new(ctypes.byref(bus)) >= 0
        assert lib.sd_bus_set_fd(bus, fd, fd) >= 0
        assert lib.sd_bus_set_server(bus, 1, Id128()) >= 0
        assert lib.sd_bus_start(bus) >= 0
        assert lib.sd_bus_attach_event(bus, event, 0) >= 0
        assert lib.sd_bus_add_filter(bus, None, self._handler, None) >= 0
        return bus

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(10)
        self.listener.close()
