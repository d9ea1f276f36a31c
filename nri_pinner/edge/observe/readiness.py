"""systemd's notify protocol (sd_notify(3)) for `nri-pinner run` under the unit's ``Type=notify``.

READY=1 is sent once the plugin is registered with the runtime and synchronized — the predicate
/readyz answers 200 on (metrics_http.readiness) — so `systemctl start nri-pinner` returns, and units
ordered after it start, only when new containers get their cpusets. STATUS= says what it waits for
(`systemctl status`), also after a reconnect; STOPPING=1 when it stops.

The protocol is one datagram of ``KEY=VALUE`` lines on the AF_UNIX socket $NOTIFY_SOCKET names (a
path, or an abstract name written with a leading '@'); the kernel attaches the sender's pid, which
``NotifyAccess=main`` checks. Written here: it is a sendto(), not worth a dependency.

The moment is found by polling that predicate (0.1 s until ready, then 1 s for STATUS): the stub
flips it inside its Synchronize handling and offers no callback, and the plugin is not touched for
this. systemd does not care about a 0.1 s lag.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, MutableMapping

import structlog

log = structlog.get_logger("nri_pinner")
NOTIFY_ENV = "NOTIFY_SOCKET"
POLL_UNTIL_READY = 0.1
POLL_WHEN_READY = 1.0


class Notifier:
    """Datagrams to one notify socket; a failed send is logged once and never raises."""

    def __init__(self, address: str) -> None:
        if address.startswith("@"):  # abstract namespace: a leading NUL on the wire
            self._target = "\0" + address[1:]
        elif address.startswith("/"):
            self._target = address
        else:  # relative paths and systemd's vsock: form (VM guests) are not for a host service
            raise ValueError(f"{NOTIFY_ENV}={address!r}: not an absolute path or an @abstract name")
        self.address = address
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._sock.settimeout(1.0)  # systemd reads its socket at once; never block the wire loop long
        self._failed = False

    def send(self, *fields: str) -> bool:
        message = "\n".join(fields)
        try:
            self._sock.sendto(message.encode(), self._target)
        except OSError as exc:
            if not self._failed:
                log.warning("cannot notify systemd", socket=self.address, error=exc.strerror or str(exc))
            self._failed = True
            return False
        self._failed = False
        return True

    def close(self) -> None:
        self._sock.close()


def from_env(env: MutableMapping[str, str]) -> Notifier | None:
    """The notifier $NOTIFY_SOCKET names, or None. The variable is taken out of ``env``
    (sd_notify's unset_environment): no child process may speak for the unit."""
    address = env.pop(NOTIFY_ENV, "")
    if not address:
        return None
    try:
        return Notifier(address)
    except ValueError as exc:
        log.warning("systemd notify socket not used", error=str(exc))
        return None


async def announce(notifier: Notifier, state: Callable[[], tuple[bool, str]],
                   until_ready: float = POLL_UNTIL_READY, when_ready: float = POLL_WHEN_READY) -> None:
    """READY=1 (with its STATUS in the same datagram) the first time ``state`` says ready, STATUS=
    whenever its text changes; until cancelled. A send that fails is tried again next time."""
    ready_sent, last_status = False, ""
    while True:
        ready, status = state()
        fields = [f"STATUS={status}"] if status != last_status else []
        if ready and not ready_sent:
            fields.insert(0, "READY=1")
        if fields and notifier.send(*fields):
            last_status, ready_sent = status, ready_sent or ready
        await asyncio.sleep(when_ready if ready_sent else until_ready)


def status_text(ready: bool, why: str, socket_path: str, runtime: str, version: str) -> str:
    """One line for `systemctl status`: /readyz's reason, the socket, and the runtime once known."""
    if ready:
        who = " ".join(filter(None, (runtime, version))) or "the runtime"
        return f"pinning: registered with {who} on {socket_path} and synchronized"
    return f"{why.removeprefix('not ready: ')} ({socket_path})"
