"""A private, real containerd (1.7 or 2.x) driven through CRI like a kubelet, for end-to-end tests.

Each instance owns a workdir (root, opt dir, logs, NRI plugin dirs, image tarballs) and a short run dir
under /run (state, sockets, runc root: unix socket paths are limited to 108 bytes). Starting an instance
first removes whatever a crashed previous run left in those paths, so runs are repeatable on one machine.
Use ``claim_workdir`` to get a workdir no concurrent run is using.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from . import host_cleanup as hc
from . import node_env
from .containerd_config import ContainerdPaths, render_config, settings_from_env
from .cri_client import CriClient
from .kubelet_model import ContainerResources, QOSClass, expand_slice
from .oci_image import build_busybox_image
from .plugins import PluginProcess, find_active_plugin
from .pods import PodHandle, add_container, remove_pod, run_pod
from .procfs import read_cpus_allowed_list

BUSYBOX_IMAGE = "e2e.local/busybox:1"
PAUSE_IMAGE = "e2e.local/pause:1"
RUN_BASE = Path("/run/nri-pinner-e2e")
START_TIMEOUT = node_env.START_TIMEOUT  # 30 s here; the emulated VM guest sets more (node_env)


class HarnessError(RuntimeError):
    pass


def claim_workdir(base: Path) -> tuple[Path, IO[str]]:
    """Lock the first free slot ``base``, ``base.1``, ... and return it with its lock file (keep it open).
    A slot whose lock is free may hold a crashed run's state; PrivateContainerd.start() cleans it."""
    for slot in range(16):
        path = base if slot == 0 else base.with_name(f"{base.name}.{slot}")
        path.mkdir(parents=True, exist_ok=True)
        lock = (path / ".lock").open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        return path, lock
    raise HarnessError(f"all 16 workdir slots of {base} are locked by running tests")


class PrivateContainerd:
    """``PrivateContainerd("1.7" | "2.1", workdir)``; ``start()`` / ``restart()`` / ``stop()``; ``.cri``."""

    def __init__(self, runtime: str, workdir: Path) -> None:
        self.install = hc.find_runtime(runtime)  # raises RuntimeMissing
        self.runtime_key = runtime
        self.drifted: list[str] = []  # drifted on purpose or seen drifting by a sampler, in order (final_counts.py)
        self.workdir = workdir.resolve()
        run_dir = RUN_BASE / hashlib.sha256(str(self.workdir).encode()).hexdigest()[:12]
        self.run_dir = run_dir
        self.paths = ContainerdPaths(
            root=self.workdir / "root",
            state=run_dir / "state",
            grpc_socket=run_dir / "containerd.sock",
            ttrpc_socket=run_dir / "containerd.sock.ttrpc",
            debug_socket=run_dir / "debug.sock",
            nri_socket=run_dir / "nri.sock",
            runc_root=run_dir / "runc",
            opt_dir=self.workdir / "opt",
            cni_bin_dir=self.workdir / "cni" / "bin",
            cni_conf_dir=self.workdir / "cni" / "conf",
            nri_plugin_dir=self.workdir / "nri" / "plugins",
            nri_plugin_config_dir=self.workdir / "nri" / "conf",
        )
        self.config_path = self.workdir / "config.toml"
        self.log_path = self.workdir / "containerd.log"
        self.pods_dir = self.workdir / "pods"
        self._pidfile = run_dir / "containerd.pid"
        self._cgroups_record = self.workdir / "pod-cgroups"
        self.plugin_pids_record = self.workdir / "plugin-pids"
        self._proc: subprocess.Popen[bytes] | None = None
        self._cri: CriClient | None = None
        self.version = ""  # CRI runtime_version of the running instance, e.g. "1.7.24~ds1"
        self.plugins: list[PluginProcess] = []
        self.start_seconds = 0.0

    # --- paths tests use ------------------------------------------------------------------------------
    @property
    def nri_socket(self) -> Path:
        return self.paths.nri_socket

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def cri(self) -> CriClient:
        if self._cri is None:
            raise HarnessError("containerd is not started")
        return self._cri

    # --- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> PrivateContainerd:
        """Clean stale state of an earlier run in these paths, write config, start, import images."""
        self.cleanup_stale()
        # A fresh instance: no images, state or pre-installed plugins of an earlier run.
        for d in (
            self.paths.root,
            self.paths.state,
            self.paths.runc_root,
            self.paths.nri_plugin_dir,
            self.paths.nri_plugin_config_dir,
        ):
            shutil.rmtree(d, ignore_errors=True)
        for d in (
            self.paths.root,
            self.paths.state,
            self.paths.opt_dir,
            self.paths.cni_bin_dir,
            self.paths.cni_conf_dir,
            self.paths.nri_plugin_dir,
            self.paths.nri_plugin_config_dir,
            self.pods_dir,
        ):
            d.mkdir(parents=True, exist_ok=True)
        if self.log_path.exists():
            self.log_path.replace(self.log_path.with_suffix(".log.prev"))
        self.config_path.write_text(render_config(self.install.major, self.paths, settings_from_env(PAUSE_IMAGE)))
        self._spawn()
        self._import_images()
        return self

    def _spawn(self) -> None:
        began = time.monotonic()
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [str(self.install.containerd), "--config", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.install.env(),
                start_new_session=True,
            )
        self._pidfile.write_text(f"{self._proc.pid}\n")
        if self._cri is None:
            self._cri = CriClient(self.paths.grpc_socket)
        deadline = began + START_TIMEOUT
        while True:
            if self._proc.poll() is not None:
                raise HarnessError(f"containerd exited with {self._proc.returncode}:\n{self.log_tail()}")
            if self.paths.grpc_socket.exists():
                try:
                    self.version = self.cri.version().runtime_version
                    break
                except Exception:  # CRI not serving yet
                    if time.monotonic() > deadline:
                        raise
            if time.monotonic() > deadline:
                raise HarnessError(f"containerd CRI not ready after {START_TIMEOUT}s:\n{self.log_tail()}")
            time.sleep(0.1)
        self.start_seconds = time.monotonic() - began

    def _import_images(self) -> None:
        images = self.workdir / "images"
        for name, cmd, file in (
            (BUSYBOX_IMAGE, ["sh"], "busybox.tar"),
            (PAUSE_IMAGE, ["sleep", "2147483647"], "pause.tar"),  # containerd stops sandboxes with SIGKILL
        ):
            tarball = images / file
            if not tarball.exists():
                build_busybox_image(name, cmd, tarball)
            self.import_image(tarball)

    def import_image(self, tarball: Path) -> None:
        """Import an OCI layout tarball (see oci_image.build_oci_image) where CRI finds it."""
        self.ctr("images", "import", "--snapshotter", "overlayfs", str(tarball))

    def ctr(self, *args: str) -> str:
        cmd = [str(self.install.ctr), "--address", str(self.paths.grpc_socket), "-n", "k8s.io", *args]
        res = subprocess.run(cmd, capture_output=True, text=True, env=self.install.env(), check=False)
        if res.returncode != 0:
            raise HarnessError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()}")
        return res.stdout

    def restart(self) -> None:
        """Stop the daemon only (pods keep running in their shims) and start it again with the same state."""
        self._terminate_daemon()
        self._spawn()

    def stop(self) -> None:
        """Remove every pod, stop plugins and the daemon, clean all this instance put on the host."""
        if self.is_running:
            try:
                self.cri.remove_everything()
            except Exception as err:  # force cleanup below handles what CRI could not
                print(f"e2e: CRI cleanup of containerd {self.version} failed: {err}")
        for plugin in self.plugins:
            plugin.stop()
        self.plugins.clear()
        self._terminate_daemon()
        if self._cri is not None:
            self._cri.close()
            self._cri = None
        self.cleanup_stale()

    def _terminate_daemon(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        self._pidfile.unlink(missing_ok=True)

    def cleanup_stale(self) -> None:
        """Kill what a run with these paths left: daemon, shims, plugins, containers, mounts, cgroups."""
        config = str(self.config_path)
        pids = hc.kill_processes_mentioning(f"--config {config}")
        hc.wait_gone(pids, 10)
        hc.kill_recorded(self.plugin_pids_record)
        # Shims carry `-address <our socket>`; external plugins started by tests carry our NRI socket.
        hc.delete_runc_containers(self.paths.runc_root)
        pids = hc.kill_processes_mentioning(str(self.paths.grpc_socket))
        pids += hc.kill_processes_mentioning(str(self.paths.nri_socket))
        hc.wait_gone(pids, 10)
        hc.unmount_below(self.paths.state, self.paths.root, self.run_dir)
        shutil.rmtree(self.run_dir, ignore_errors=True)  # sockets, state, runc root: nothing survives a stop
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self._cgroups_record.exists():
            for parent in sorted(set(self._cgroups_record.read_text().split())):
                if parent.endswith(".slice"):
                    hc.stop_pod_slice(parent.rsplit("/", 1)[-1])  # systemd driver: the slice is systemd's
                else:
                    hc.remove_cgroup_tree(parent)
            self._cgroups_record.unlink()

    def record_pod_cgroup(self, cgroup_parent: str) -> None:
        with self._cgroups_record.open("a") as f:
            f.write(cgroup_parent + "\n")

    # --- pods ----------------------------------------------------------------------------------------------
    def run_pod(
        self, qos: QOSClass | str, cpu_milli_request: int = 0, cpu_milli_limit: int = 0, **kwargs: Any
    ) -> PodHandle:
        """A kubelet-like pod (see pods.run_pod for keyword arguments), started; returns its ids."""
        return run_pod(
            self.cri, self.pods_dir, self.record_pod_cgroup, qos, cpu_milli_request, cpu_milli_limit, **kwargs
        )

    def add_container(self, pod: PodHandle, name: str, resources: ContainerResources, **kwargs: Any) -> str:
        return add_container(self.cri, pod, name, resources, **kwargs)

    def remove_pod(self, pod: PodHandle, stop_timeout_s: int | None = None) -> None:
        remove_pod(self.cri, pod, stop_timeout_s)

    # --- logs and plugins -----------------------------------------------------------------------------
    def log_offset(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def log_text(self, since: int = 0) -> str:
        with self.log_path.open("rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:]) if self.log_path.exists() else "(no log)"

    def wait_for_log(self, pattern: str | re.Pattern[str], since: int = 0, timeout: float = 15.0) -> re.Match[str]:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        timeout = node_env.scaled(timeout)
        deadline = time.monotonic() + timeout
        while True:
            found = regex.search(self.log_text(since))
            if found:
                return found
            if time.monotonic() > deadline:
                raise HarnessError(f"no {regex.pattern!r} in containerd log after {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def wait_plugin_active(self, name: str | None = None, since: int = 0, timeout: float = 15.0) -> str:
        """Wait until a plugin (``<idx>-<name>``, or any) registered after log offset ``since`` is active:
        use after restart() for pre-installed plugins."""
        timeout = node_env.scaled(timeout)
        deadline = time.monotonic() + timeout
        while (found := find_active_plugin(self.log_text(since), name)) is None:
            if time.monotonic() > deadline:
                raise HarnessError(f"plugin {name or '(any)'} not active after {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)
        return found

    def start_plugin(
        self,
        argv: list[str],
        *,
        name: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 15.0,
    ) -> PluginProcess:
        """Start an external NRI plugin and wait until containerd lists it as active (``name`` = its
        registered "<idx>-<name>", or any plugin when None). Its output goes to ``.log_path``."""
        plugin = PluginProcess.spawn(self, argv, env=env)
        self.plugins.append(plugin)
        plugin.wait_connected(name, node_env.scaled(timeout))
        return plugin

    def install_preinstalled_plugin(self, index_name: str, executable: Path, config: bytes | None = None) -> Path:
        """Put a pre-installed plugin (``plugin_path/<idx>-<name>``) in place; takes effect on restart()."""
        target = self.paths.nri_plugin_dir / index_name
        shutil.copy2(executable, target)
        target.chmod(0o755)
        if config is not None:
            (self.paths.nri_plugin_config_dir / f"{index_name}.conf").write_bytes(config)
        return target

    # --- container inspection -------------------------------------------------------------------------
    def container_pid(self, container_id: str) -> int:
        state, info = self.cri.container_status(container_id)
        pid = int(info.get("pid", 0))
        if state != "RUNNING" or pid <= 0:
            raise HarnessError(f"container {container_id[:12]} is {state} (pid {pid}), not running")
        return pid

    def container_cgroups_path(self, container_id: str) -> str:
        _, info = self.cri.container_status(container_id)
        return str(info["runtimeSpec"]["linux"]["cgroupsPath"])

    def cgroup_dir(self, container_id: str, controller: str = "cpuset") -> Path:
        """The container's cgroup directory (v1: in ``controller``'s hierarchy). cgroupsPath is a path
        under the cgroupfs driver; under systemd it is runc's "<slice>:<prefix>:<name>", the scope
        "<prefix>-<name>.scope" inside the expanded slice."""
        path = self.container_cgroups_path(container_id)
        if not path.startswith("/") and path.count(":") == 2:
            slice_name, prefix, name = path.split(":")
            path = expand_slice(slice_name) + (f"/{prefix}-{name}.scope" if prefix else f"/{name}")
        rel = path.lstrip("/")
        v1 = hc.CGROUP_ROOT / controller
        return v1 / rel if v1.is_dir() else hc.CGROUP_ROOT / rel

    def scope_unit(self, container_id: str) -> str:
        """The container's systemd unit (systemd driver), e.g. "cri-containerd-<id>.scope"."""
        return self.cgroup_dir(container_id).name

    def _cpuset_file(self, container_id: str) -> Path:
        return self.cgroup_dir(container_id) / "cpuset.cpus"

    def cpus_allowed_list(self, container_id: str) -> str:
        """``Cpus_allowed_list`` of the container's main process, e.g. "0-1"."""
        return read_cpus_allowed_list(self.container_pid(container_id))

    def cgroup_cpuset(self, container_id: str) -> str:
        return self._cpuset_file(container_id).read_text().strip()

    def write_cgroup_cpuset(self, container_id: str, cpus: str) -> None:
        """Write the container's cgroup cpuset behind the runtime's back (tests use it to cause drift)."""
        self.drifted.append(container_id)
        self._cpuset_file(container_id).write_text(cpus)


__all__ = ["BUSYBOX_IMAGE", "PAUSE_IMAGE", "HarnessError", "PodHandle", "PrivateContainerd", "claim_workdir"]
