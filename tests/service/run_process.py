"""`nri-pinner run` as a real process (`python -m nri_pinner run --config FILE`), for what only a whole
process shows: exit codes, signals, what reaches stderr, files left behind. No runtime listens on its
NRI socket: the plugin keeps retrying the connection, with its inspection socket and metrics up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DUAL_SOCKET = REPO / "tests" / "fixtures" / "sysfs" / "dual-socket-ht"


def config_text(workdir: Path, **sections: Mapping[str, Any]) -> str:
    """A config with every path inside ``workdir``; ``sections`` override tables key by key."""
    data: dict[str, dict[str, Any]] = {
        "cpu_manager": {"reserved_cpus": "0"},
        "nri": {"socket": str(workdir / "nri.sock"), "reconnect_max_seconds": 0.5},
        "state": {"checkpoint": str(workdir / "cp.json")},
        "inspect": {"socket": str(workdir / "inspect.sock")},
        "reconcile": {"period_seconds": 0, "cri_socket": "", "cgroup_root": str(workdir / "cgroup"),
                      "cgroup_writes": False, "systemd_bus": ""},
        "log": {"format": "json"},
    }
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    lines = [f"sysfs_root = {json.dumps(str(DUAL_SOCKET))}"]
    for name, values in data.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


@dataclass
class Run:
    process: subprocess.Popen[str]
    config: Path

    def wait_started(self, socket: Path, timeout: float = 20.0) -> None:
        """Until the inspection socket exists (the service is up), or the process ended."""
        deadline = time.monotonic() + timeout
        while not socket.exists():
            if self.process.poll() is not None:
                raise AssertionError(f"exited {self.process.returncode} before serving:\n{self.output()[1]}")
            assert time.monotonic() < deadline, "no inspection socket"
            time.sleep(0.05)

    def signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    def stop(self, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def output(self, timeout: float = 20.0) -> tuple[str, str]:
        """stdout and stderr once the process has ended."""
        out, err = self.process.communicate(timeout=timeout)
        return out, err


def start(workdir: Path, name: str = "config.toml", **sections: Mapping[str, Any]) -> Run:
    config = workdir / name
    config.write_text(config_text(workdir, **sections))
    return start_with(config)


def start_with(config: Path, *args: str, env: Mapping[str, str] | None = None) -> Run:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NRI_")}
    environ.update(env or {})
    process = subprocess.Popen([sys.executable, "-m", "nri_pinner", "run", "--config", str(config), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=environ)
    return Run(process, config)


def json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def terminate(run: Run) -> None:
    """Test teardown: the process ends whatever the test did."""
    if run.process.poll() is None:
        run.process.send_signal(signal.SIGTERM)
        try:
            run.process.wait(10)
        except subprocess.TimeoutExpired:
            run.process.kill()
            run.process.wait()
    for stream in (run.process.stdout, run.process.stderr):
        if stream is not None:
            stream.close()
