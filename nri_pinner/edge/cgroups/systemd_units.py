"""Tell systemd what a pool change wrote into a container scope, so its re-applications agree.

Why: under the systemd cgroup driver every container runs in a transient scope
(`cri-containerd-<id>.scope`) whose `AllowedCPUs` / `AllowedMemoryNodes` runc set from the create's
cpuset. Whenever systemd re-applies that unit's cgroup settings (set-property or a runc update on
the scope; after any daemon-reload, a sibling's runc update or a container started in the pod;
docs/systemd-reapply.md) it writes those stale values back over a direct cgroup write, and a shared
container is back on CPUs made exclusive since. Setting the scope's properties at runtime through
`SetUnitProperties(name, runtime=true, …)`, as runc's systemd manager does on an update, makes
systemd hold what we wrote: a re-application is then a no-op. systemd writes the cgroup itself.
The same holds for a pod slice's CPU quota, which a pod with exclusive CPUs runs without
(`no_quota_call`, used by quota_writer.py), and which a pod demoted for pod-level resources gets back
(`quota_call`).

Cost: one D-Bus call per changed scope, all of a pass sent at once and their replies collected
together (no wait between calls; systemd still handles them one by one). Default bus: systemd's private socket
`/run/systemd/private` — a direct connection that needs no dbus-daemon and on which systemd grants
root callers without polkit (the system bus socket works too: Hello is sent there).
Failures (no socket, a refused or late call, a malformed answer) are reported per unit; the caller then falls back
as for a failed cgroup write (an NRI update in the next reply: runc sets the properties then).
The bus code is sans-I/O where it can be (jeepney's message builder and parser); the socket is
driven here with a deadline.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import termios
import time
from collections.abc import Iterable, Sequence

from jeepney import DBusAddress, HeaderFields, Message, MessageType, Parser, new_method_call
from jeepney.io.blocking import prep_socket

from ...engine.cpuset import CPUSet

SYSTEMD = DBusAddress("/org/freedesktop/systemd1", bus_name="org.freedesktop.systemd1",
                      interface="org.freedesktop.systemd1.Manager")
BUS = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus")
RETRY_CONNECT_SECONDS = 10.0  # a missing bus is not asked again on every pass


class BusError(OSError):
    """The bus could not be reached or answered out of protocol."""


def scope_unit(cgroups_path: str) -> str | None:
    """The systemd unit a container runs in, from NRI's `linux.cgroups_path` in the systemd
    driver's `<slice>:<prefix>:<name>` form (runc: `<prefix>-<name>.scope`); None for cgroupfs
    paths, which no unit holds."""
    if not cgroups_path or cgroups_path.startswith("/") or cgroups_path.count(":") != 2:
        return None
    _, prefix, name = cgroups_path.split(":")
    if not name:
        return None
    return name if name.endswith(".slice") else (f"{prefix}-{name}.scope" if prefix else f"{name}.scope")


def cpu_mask(cpus: Iterable[int]) -> bytes:
    """A CPU (or NUMA node) set as systemd's D-Bus `ay` bitmask: bit i of byte j is number 8j+i
    (systemd `cpu_set_from_dbus`; runc `RangeToBits` builds the same little-endian bytes)."""
    ids = list(cpus)
    mask = bytearray((max(ids) // 8 + 1) if ids else 0)
    for i in ids:
        mask[i // 8] |= 1 << (i % 8)
    return bytes(mask)


def set_properties_call(unit: str, cpus: CPUSet, mems: CPUSet | None) -> Message:
    """`SetUnitProperties(unit, runtime=true, [AllowedCPUs, AllowedMemoryNodes])`; runtime: the
    value lives until the scope goes (no drop-in written under /etc or /run/systemd/system.control)."""
    props: list[tuple[str, tuple[str, bytes]]] = [("AllowedCPUs", ("ay", cpu_mask(cpus)))]
    if mems is not None:
        props.append(("AllowedMemoryNodes", ("ay", cpu_mask(mems))))
    msg: Message = new_method_call(SYSTEMD, "SetUnitProperties", "sba(sv)", (unit, True, props))
    return msg


USEC_INFINITY = (1 << 64) - 1  # systemd's USEC_INFINITY: CPUQuotaPerSecUSec=infinity is "no quota"


def no_quota_call(unit: str) -> Message:
    """`SetUnitProperties(unit, runtime=true, [CPUQuotaPerSecUSec=infinity])`: a pod slice without a CFS
    quota, as the kubelet's libcontainer asks systemd for a pod created with cpu quota -1 (runc
    `addCpuQuota`: MaxUint64 for a quota <= 0). systemd writes cpu.cfs_quota_us -1 / cpu.max "max <period>"
    and keeps the period it has."""
    props = [("CPUQuotaPerSecUSec", ("t", USEC_INFINITY))]
    msg: Message = new_method_call(SYSTEMD, "SetUnitProperties", "sba(sv)", (unit, True, props))
    return msg


def quota_per_sec(quota: int, period: int) -> int:
    """CPUQuotaPerSecUSec for a CFS quota (µs per period): quota x 1 s / period, rounded up to 10 ms, as
    runc's systemd manager computes it (libcontainer/cgroups/systemd/common.go addCpuQuota: systemd keeps
    whole percents of a CPU, so a fraction is rounded up to leave the children their quota). systemd
    writes it back as cpu.max "<per-sec x period / 1 s> <period>" (v1: cpu.cfs_quota_us the same, with
    cpu.cfs_period_us), the period being the slice's CPUQuotaPeriodUSec (src/core/cgroup.c
    cgroup_apply_unified_cpu_quota, cgroup_apply_legacy_cpu_quota)."""
    per_sec = quota * 1_000_000 // period
    return -(-per_sec // 10_000) * 10_000


def quota_call(unit: str, quota: int, period: int) -> Message:
    """`SetUnitProperties(unit, runtime=true, [CPUQuotaPerSecUSec=<quota per second>])`: a pod slice's CFS
    quota put back (`quota_per_sec`), as the kubelet's libcontainer asks systemd for a pod's quota. Its
    CPUQuotaPeriodUSec is left: the kubelet set it when it made the slice, and nothing here changed it."""
    props = [("CPUQuotaPerSecUSec", ("t", quota_per_sec(quota, period)))]
    msg: Message = new_method_call(SYSTEMD, "SetUnitProperties", "sba(sv)", (unit, True, props))
    return msg


def connect(path: str, timeout: float) -> socket.socket:
    """A bus connection authenticated (EXTERNAL) on which the peer has read BEGIN: only then may a call go.

    Why the wait: systemd's sd-bus server, when one read brings it BEGIN and the first message together,
    keeps that message in its input buffer and waits for the socket to become readable again (systemd
    v257 src/libsystemd/sd-bus/bus-socket.c:443-445 keeps the bytes after BEGIN; sd-bus.c:2611-2614 and
    2651-2661 then ask for POLLIN and no timeout while nothing is queued; io_callback, 3675-3688, processes
    once per wake-up). The first call of a fresh connection then goes unanswered until the client sends
    again, when it fits with BEGIN in the server's first 256-byte read (enable-nri's RestartUnit, 212 bytes,
    does; a scope's SetUnitProperties, 321+, does not): seen on PID 1 in the VM tier (40-deb-unit's
    probe) and with libsystemd's own server in tests/service/test_sd_bus_handshake.py. The socket's
    unread byte count (TIOCOUTQ) says when BEGIN was read. Raises OSError (TimeoutError when BEGIN is
    still unread after ``timeout``)."""
    deadline = time.monotonic() + timeout
    sock: socket.socket = prep_socket(path, timeout=timeout)
    try:
        pause, unread = 0.0005, bytearray(4)
        while True:
            fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, unread)
            if struct.unpack("i", unread)[0] == 0:
                return sock
            if time.monotonic() + pause > deadline:
                raise TimeoutError(f"{path} has not read the end of the handshake within {timeout:g} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
    except BaseException:
        sock.close()
        raise


class SystemdUnits:
    """One connection to systemd, used by one pass at a time (the core keeps one pass in flight: no lock)."""

    def __init__(self, socket_path: str = "/run/systemd/private", timeout: float = 0.5) -> None:
        self.socket_path, self.timeout = socket_path, timeout
        self._sock: socket.socket | None = None
        self._parser = Parser()
        self._serial = 0
        self._down_until = 0.0
        self.last_error = ""

    def agree(self, items: Sequence[tuple[str, CPUSet, CPUSet | None]]) -> dict[str, str]:
        """Set each (unit, cpus, mems) at once; returns {unit: why} for those not confirmed.
        Waits at most `timeout` for all replies together."""
        return self.call([(unit, set_properties_call(unit, cpus, mems)) for unit, cpus, mems in items])

    def call(self, calls: Sequence[tuple[str, Message]]) -> dict[str, str]:
        """Send every (unit, call) at once; {unit: why} for those not confirmed (`agree`)."""
        if not calls:
            return {}
        try:
            sock = self._connect()
            pending = self._send(sock, calls)
            failed = self._collect(sock, pending)
        except Exception as exc:  # jeepney's parser raises KeyError & co. on a malformed message
            # every call of the pass failed (the caller's direct writes still go ahead); a new connection
            # next time, whatever the stream held
            self._drop(f"{type(exc).__name__}: {exc}")
            failed = {unit: self.last_error for unit, _ in calls}
        return failed

    def _connect(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        if time.monotonic() < self._down_until:
            raise BusError(f"systemd bus {self.socket_path} unavailable: {self.last_error}")
        try:
            sock = connect(self.socket_path, self.timeout)
        except (OSError, ValueError) as exc:
            self._down_until = time.monotonic() + RETRY_CONNECT_SECONDS
            raise BusError(f"cannot connect to {self.socket_path}: {exc}") from exc
        self._sock, self._parser = sock, Parser()
        if os.path.basename(self.socket_path) != "private":  # a message bus wants Hello first
            serial = self._next_serial()
            sock.settimeout(self.timeout)
            sock.sendall(new_method_call(BUS, "Hello").serialise(serial=serial))
            failed = self._collect(sock, {serial: "Hello"})
            if failed:
                raise BusError(f"Hello refused on {self.socket_path}: {failed['Hello']}")
        return sock

    def _next_serial(self) -> int:
        self._serial = self._serial % 0x7FFFFFFF + 1
        return self._serial

    def _send(self, sock: socket.socket, calls: Sequence[tuple[str, Message]]) -> dict[int, str]:
        pending: dict[int, str] = {}
        chunks = []
        for unit, msg in calls:
            serial = self._next_serial()
            chunks.append(msg.serialise(serial=serial))
            pending[serial] = unit
        if chunks:
            sock.settimeout(self.timeout)
            sock.sendall(b"".join(chunks))
        return pending

    def _collect(self, sock: socket.socket, pending: dict[int, str]) -> dict[str, str]:
        """Replies by serial until none is pending or the deadline; a reply to an earlier pass's
        late call is skipped. The unanswered are failures (and a late answer is read and dropped
        by the next pass)."""
        failed: dict[str, str] = {}
        deadline = time.monotonic() + self.timeout
        while pending:
            msg = self._parser.get_next_message()
            if msg is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                sock.settimeout(left)
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    break
                if not data:
                    raise BusError(f"{self.socket_path} closed the connection")
                self._parser.add_data(data)
                continue
            serial = msg.header.fields.get(HeaderFields.reply_serial)
            unit = pending.pop(serial, None) if isinstance(serial, int) else None
            if unit is not None and msg.header.message_type == MessageType.error:
                name = msg.header.fields.get(HeaderFields.error_name, "error")
                detail = msg.body[0] if msg.body and isinstance(msg.body[0], str) else ""
                failed[unit] = f"{name}: {detail}".rstrip(": ")
        for unit in pending.values():
            failed[unit] = f"no answer from systemd within {self.timeout:g} s"
        return failed

    def _drop(self, why: str) -> None:
        self.last_error = why
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def close(self) -> None:
        self._drop("closed")
