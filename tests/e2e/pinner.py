"""Run the real `nri-pinner run` against a private containerd, and talk to it like an operator."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from . import final_counts, node_env
from .harness import PrivateContainerd
from .plugins import PluginProcess

PLUGIN_NAME = "90-nri-pinner"
QOS_SLICES = ("kubepods-burstable.slice", "kubepods-besteffort.slice")  # the kubelet's, systemd driver


@dataclass
class Pinner:
    runtime: PrivateContainerd
    process: PluginProcess
    config_path: Path
    inspect_socket: Path
    checkpoint: Path
    log_file: Path | None = None  # the plugin's log when not its process's output (pre-installed)
    drift_mark: int = field(default=0, init=False)  # runtime.drifted's length at the start

    def __post_init__(self) -> None:
        self.drift_mark = len(self.runtime.drifted)
        final_counts.started(self)

    def status(self, as_json: bool = True) -> Any:
        argv = [sys.executable, "-m", "nri_pinner", "status", "--socket", str(self.inspect_socket)]
        out = subprocess.run([*argv, "--json"] if as_json else argv, check=True, capture_output=True,
                             text=True, timeout=node_env.scaled(30)).stdout
        return json.loads(out) if as_json else out

    def assignment(self, container_id: str) -> Mapping[str, Any]:
        for a in self.status()["assignments"]:
            if a["container_id"] == container_id:
                return a  # type: ignore[no-any-return]
        raise KeyError(f"{container_id[:12]} not in nri-pinner status")

    @property
    def pool_on_qos_slices(self) -> bool:
        """Its config holds the shared pool on the QoS slices (`reconcile.systemd_pool_on_qos_slices`)."""
        return final_counts.configured(self)

    def below_held_slice(self, container_id: str) -> bool:
        """The container's CPUs are bounded by a QoS slice this plugin holds at the pool: the setting on,
        its pod slice below kubepods-burstable.slice or kubepods-besteffort.slice (the systemd driver; a
        Guaranteed pod's slice sits beside them and keeps its shared containers per scope)."""
        return self.pool_on_qos_slices and self.runtime.cgroup_dir(container_id).parent.parent.name in QOS_SLICES

    def shared_cpus(self, container_id: str) -> str:
        """The CPUs a shared container's cgroup lets it run on, as this plugin keeps them: its own
        `cpuset.cpus`, or below a held QoS slice its `cpuset.cpus.effective` (its own set is the whole
        node there, the slice the pool: core/qos_slices.py)."""
        return self.shared_cpus_file(container_id).read_text().strip()

    def shared_cpus_file(self, container_id: str) -> Path:
        """The file `shared_cpus` reads (a sampler reads it in a loop)."""
        if self.below_held_slice(container_id):
            return self.runtime.cgroup_dir(container_id) / "cpuset.cpus.effective"
        return self.runtime._cpuset_file(container_id)

    def own_cpuset(self, container_id: str, pool: str) -> str:
        """What a shared container's own `cpuset.cpus` is to hold while the pool is `pool`: the whole node
        below a held QoS slice, else the pool (what a drift check compares and repairs)."""
        return str(node_env.online_cpus()) if self.below_held_slice(container_id) else pool

    def stop(self) -> None:
        final_counts.record(self)
        self.process.stop()
        self.runtime.plugins.remove(self.process)


def config_text(runtime: PrivateContainerd, workdir: Path, *, test_settings: bool = True,
                **sections: Mapping[str, Any]) -> str:
    """This runtime's private paths; with ``test_settings`` also a reserved CPU and a fast reconcile."""
    base: dict[str, dict[str, Any]] = {
        "nri": {"socket": str(runtime.nri_socket)},
        "reconcile": {"cri_socket": str(runtime.paths.grpc_socket)},
        "state": {"checkpoint": str(workdir / "checkpoint.json")},
        "inspect": {"socket": str(workdir / "inspect.sock")},
    }
    if node_env.SYSTEMD_TIMEOUT:  # an emulated node's systemd answers D-Bus calls slowly
        base["reconcile"]["systemd_timeout_seconds"] = float(node_env.SYSTEMD_TIMEOUT)
    if test_settings:
        base["cpu_manager"] = {"reserved_cpus": "0"}
        base["reconcile"]["period_seconds"] = 1.0
        base["log"] = {"format": "json", "level": "info"}
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    if node_env.POOL_ON_QOS_SLICES:
        _pool_on_qos_slices(base["reconcile"])
    lines = []
    for name, values in base.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def _pool_on_qos_slices(reconcile: dict[str, Any]) -> None:
    """The knob's setting, unless the scenario chose its own: an explicit value, or systemd calls or
    cgroup writes off (an untold control: the setting needs both, the config refuses it otherwise)."""
    if ("systemd_pool_on_qos_slices" in reconcile or reconcile.get("systemd_bus") == ""
            or reconcile.get("cgroup_writes") is False):
        return
    reconcile["systemd_pool_on_qos_slices"] = True


def start_pinner(runtime: PrivateContainerd, workdir: Path | None = None, *, test_settings: bool = True,
                 timeout: float = 30.0, **sections: Mapping[str, Any]) -> Pinner:
    workdir = workdir or Path(tempfile.mkdtemp(prefix="pinner-", dir="/tmp"))  # short: unix socket paths
    config = workdir / "config.toml"
    config.write_text(config_text(runtime, workdir, test_settings=test_settings, **sections))
    process = runtime.start_plugin([sys.executable, "-m", "nri_pinner", "run", "--config", str(config)],
                                   name=PLUGIN_NAME, timeout=timeout)
    pinner = Pinner(runtime, process, config, workdir / "inspect.sock", workdir / "checkpoint.json")
    deadline = time.monotonic() + node_env.scaled(15)
    while not pinner.inspect_socket.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no inspection socket:\n{process.log_text()[-3000:]}")
        time.sleep(0.05)
    return pinner


@contextlib.contextmanager
def preinstalled(runtime: PrivateContainerd, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pinner]:
    """nri-pinner installed into the private containerd's plugin_path (`nri-pinner install`) and
    launched by containerd on a restart; afterwards uninstalled, and containerd restarted (it kills
    its pre-installed plugins when it stops)."""
    from nri_pinner.cli.install import install

    state = Path(tempfile.mkdtemp(prefix="pinner-pre-", dir="/tmp"))
    config = state / "config.toml"
    config.write_text(config_text(runtime, state, log={"file": str(state / "nri-pinner.log")}))
    # Every host path install touches (marker, unit checks, the plugin dir) goes under the install root:
    # the private containerd's workdir, whose nri/plugins is the plugin_path containerd launches from.
    monkeypatch.setenv("NRI_PINNER_INSTALL_ROOT", str(runtime.workdir))
    plugin_dir = "/" + str(runtime.paths.nri_plugin_dir.relative_to(runtime.workdir))
    assert install(plugin_dir, "90", str(config), python=sys.executable) == 0
    pinner: Pinner | None = None
    try:
        since = runtime.log_offset()
        runtime.restart()
        runtime.wait_plugin_active(PLUGIN_NAME, since=since, timeout=30)  # scaled by the harness
        pinner = Pinner(runtime, None, config, state / "inspect.sock", state / "checkpoint.json",  # type: ignore[arg-type]
                        log_file=state / "nri-pinner.log")
        yield pinner
    finally:
        if pinner is not None:
            final_counts.record(pinner)
        assert install(plugin_dir, "90", str(config), uninstall=True) == 0
        runtime.restart()


def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.1) -> bool:
    """Poll ``predicate`` until true or ``timeout`` (stretched on an emulated node: node_env.scaled)."""
    deadline = time.monotonic() + node_env.scaled(timeout)
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
