"""External NRI plugin processes started by tests against a PrivateContainerd."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .host_cleanup import record_pid
from .pin_plugin import REPO

if TYPE_CHECKING:
    from .harness import PrivateContainerd

# containerd (logrus) escapes the quotes in msg="...". A plugin is active (synchronized and in the list
# of plugins that get events) once, after its `registered as "<idx>-<name>"` line, containerd prints the
# invocation order with it: `#1: "50-x" (external:50-x[pid])` / `(pre-connected:60-x[pid])`. That holds
# for external and pre-installed plugins on 1.7 and 2.x; the `plugin "50-x" connected` line does not
# (pre-installed plugins never get it, and 1.7 logs it even after a failed Synchronize).
REGISTERED = re.compile(r'registered as \\?"(?P<name>[^"\\]+)\\?"')
CONNECTED = re.compile(r'plugin \\?"(?P<name>[^"\\]+)\\?" connected')


def find_active_plugin(log: str, name: str | None = None) -> str | None:
    """The first plugin registered in ``log`` (with ``name`` if given) that is listed in a later
    invocation-order line; None if there is none yet."""
    for reg in REGISTERED.finditer(log):
        if name is not None and reg.group("name") != name:
            continue
        listed = re.compile(r'#\d+: \\?"' + re.escape(reg.group("name")) + r'\\?" \(')
        if listed.search(log, reg.end()):
            return reg.group("name")
    return None


class PluginError(RuntimeError):
    pass


class PluginProcess:
    """A plugin process with its own log file; ``name`` is what containerd registered it as."""

    def __init__(self, runtime: PrivateContainerd, proc: subprocess.Popen[bytes], log_path: Path, since: int) -> None:
        self.runtime = runtime
        self.proc = proc
        self.log_path = log_path
        self._since = since
        self.name = ""

    @classmethod
    def spawn(cls, runtime: PrivateContainerd, argv: list[str], env: dict[str, str] | None = None) -> PluginProcess:
        log_dir = runtime.workdir / "plugin-logs"
        log_dir.mkdir(exist_ok=True)
        log_path = log_dir / f"{Path(argv[0]).name}-{time.strftime('%H%M%S')}-{time.monotonic_ns() % 10**6}.log"
        since = runtime.log_offset()
        full_env = {**os.environ, "NRI_SOCKET_PATH": str(runtime.nri_socket), **(env or {})}
        with log_path.open("wb") as log:
            # cwd: the example plugins live in the checkout's examples/ folder, not in the installed package
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=REPO)
        record_pid(runtime.plugin_pids_record, proc.pid)  # a crashed run's plugins get killed next start
        return cls(runtime, proc, log_path, since)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_connected(self, name: str | None = None, timeout: float = 15.0) -> str:
        """Wait until containerd lists the plugin (registered after it started) as active."""
        deadline = time.monotonic() + timeout
        while True:
            found = find_active_plugin(self.runtime.log_text(self._since), name)
            if found is not None:
                self.name = found
                return found
            if self.proc.poll() is not None:
                raise PluginError(
                    f"plugin {self.proc.args!r} exited with {self.proc.returncode} before connecting; "
                    f"its log:\n{self.log_text()[-4000:]}\ncontainerd log:\n{self.runtime.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise PluginError(
                    f"plugin {name or self.proc.args!r} not connected after {timeout}s; its log:\n"
                    f"{self.log_text()[-4000:]}\ncontainerd log:\n{self.runtime.log_tail()}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)
