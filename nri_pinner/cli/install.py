"""`nri-pinner install`: set nri-pinner up as a pre-installed NRI plugin that containerd launches.

containerd starts every executable ``<plugin_path>/<NN>-<name>`` when it starts, with only
``NRI_PLUGIN_NAME``, ``NRI_PLUGIN_IDX`` and ``NRI_PLUGIN_SOCKET`` (a connected fd) in the environment:
no arguments, no PATH, output discarded. The launcher is therefore a tiny sh script with absolute
paths only. Exactly one nri-pinner may run per node (two would both claim every container's
cpuset.cpus), so installing refuses while the systemd unit is enabled or another ``nri-pinner run``
(the unit, a DaemonSet pod, a hand-started one) is alive, and leaves a marker that keeps the unit
from starting.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

PLUGIN_NAME = "nri-pinner"
SIGNATURE = "# written by nri-pinner install"
UNIT = "nri-pinner.service"
# Set in the DaemonSet's container env (packaging/kubernetes/base/daemonset.yaml); visible to a host-side
# install through /proc/<pid>/environ.
DEPLOYMENT_ENV = "NRI_PINNER_DEPLOYMENT"
ROOT_ENV = "NRI_PINNER_INSTALL_ROOT"
_INDEX = re.compile(r"^[0-9]{2}$")


class InstallError(Exception):
    """Installing would break the node or cannot be done; the message says why and what to do."""


@dataclass(frozen=True)
class HostPaths:
    """Where install looks on the host; every path hangs off ``root`` so tests can use a tmp dir."""

    root: Path = Path("/")

    @classmethod
    def from_env(cls) -> HostPaths:
        return cls(Path(os.environ.get(ROOT_ENV, "/")))

    def _under(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    @property
    def marker(self) -> Path:
        """Present while pre-installed; the unit has ``ConditionPathExists=!`` on it."""
        return self._under("/etc/nri-pinner/pre-installed")

    @property
    def unit_dirs(self) -> tuple[Path, ...]:
        return (self._under("/etc/systemd/system"), self._under("/run/systemd/system"))

    @property
    def proc(self) -> Path:
        return self._under("/proc")


@dataclass(frozen=True)
class RunningInstance:
    pid: int
    mode: str  # "pre-installed" | "daemonset" | "systemd" | "external"
    argv: tuple[str, ...]


def launcher_text(python: str, config: str) -> str:
    """The launcher script: absolute paths only, since containerd gives it no PATH and no arguments."""
    return (
        "#!/bin/sh\n"
        f"{SIGNATURE}: a pre-installed NRI plugin; containerd passes NRI_PLUGIN_NAME,\n"
        "# NRI_PLUGIN_IDX and NRI_PLUGIN_SOCKET (a connected fd). Remove with `nri-pinner install --uninstall`.\n"
        f"exec {shlex.quote(python)} -m nri_pinner run --config {shlex.quote(config)}\n"
    )


def _read_text(path: Path) -> str | None:
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError:  # gone, or not ours to read
        return None


def _is_nri_pinner_run(argv: list[str]) -> bool:
    """``.../nri-pinner run ...`` or ``python -m nri_pinner run ...``."""
    for i, arg in enumerate(argv):
        program = os.path.basename(arg) == PLUGIN_NAME
        module = arg == "nri_pinner" and i > 0 and argv[i - 1] == "-m"
        if (program or module) and "run" in argv[i + 1 :]:
            return True
    return False


def running_instances(paths: HostPaths, own_pid: int | None = None) -> Iterator[RunningInstance]:
    """Every live ``nri-pinner run`` process on the host, classified by how it was started."""
    own_pid = os.getpid() if own_pid is None else own_pid
    try:
        entries = list(paths.proc.iterdir())
    except OSError:
        return
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == own_pid:
            continue
        cmdline = _read_text(entry / "cmdline")
        if not cmdline:
            continue
        argv = [a for a in cmdline.split("\0") if a]
        if not _is_nri_pinner_run(argv):
            continue
        env_text = _read_text(entry / "environ") or ""
        env = dict(kv.split("=", 1) for kv in env_text.split("\0") if "=" in kv)
        parent_comm = ""
        status = _read_text(entry / "status") or ""
        ppid = re.search(r"^PPid:\s*(\d+)", status, re.M)
        if ppid:
            parent_comm = (_read_text(paths.proc / ppid.group(1) / "comm") or "").strip()
        if env.get(DEPLOYMENT_ENV) == "daemonset":
            mode = "daemonset"
        elif "NRI_PLUGIN_SOCKET" in env or parent_comm.startswith("containerd"):
            mode = "pre-installed"
        elif "INVOCATION_ID" in env:
            mode = "systemd"
        else:
            mode = "external"
        yield RunningInstance(int(entry.name), mode, tuple(argv))


def enabled_unit_links(paths: HostPaths) -> list[Path]:
    """``*.wants/nri-pinner.service`` links: the unit is enabled (persistently or at runtime)."""
    # The links usually dangle from where we look (tests, a chroot): check the link, not its target.
    wants = (w / UNIT for d in paths.unit_dirs if d.is_dir() for w in d.glob("*.wants"))
    return sorted(link for link in wants if os.path.lexists(link))


def _conflicts(paths: HostPaths) -> list[str]:
    problems = [
        f"the systemd unit is enabled ({link}): run `systemctl disable --now {UNIT}` first"
        for link in enabled_unit_links(paths)
    ]
    how = {
        "daemonset": "by the nri-pinner DaemonSet: remove the DaemonSet (or its node) first",
        "systemd": f"by systemd: run `systemctl disable --now {UNIT}` first",
        "external": "by hand or another supervisor: stop it first",
    }
    for inst in running_instances(paths):
        if inst.mode != "pre-installed":
            problems.append(f"`nri-pinner run` is running as pid {inst.pid}, started {how[inst.mode]}")
    return problems


def _our_launchers(plugin_dir: Path) -> list[Path]:
    found = []
    for path in sorted(plugin_dir.glob(f"[0-9][0-9]-{PLUGIN_NAME}")):
        text = _read_text(path)
        if text is not None and SIGNATURE in text:
            found.append(path)
    return found


def _write_atomic(path: Path, text: str, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)


def _log_file_hint(config: Path) -> str | None:
    try:
        data = tomllib.loads(config.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    log = data.get("log")
    if isinstance(log, dict) and log.get("file"):
        return None
    return (
        f"note: containerd discards a pre-installed plugin's output; set [log] file = "
        f'"/var/log/nri-pinner.log" in {config} to keep its log.'
    )


ENABLE_NRI_HELP = """\
containerd must have NRI enabled and be restarted to launch pre-installed plugins:
  containerd 1.7: NRI is off by default; in /etc/containerd/config.toml set
      [plugins."io.containerd.nri.v1.nri"]
        disable = false
        plugin_path = "{plugin_dir}"
  containerd 2.x: NRI is on by default (plugin_path defaults to /opt/nri/plugins).
then: systemctl restart containerd"""


def do_install(
    plugin_dir: Path, index: str, config: Path, python: str, paths: HostPaths, out: TextIO
) -> None:
    if not _INDEX.match(index):
        raise InstallError(f"index must be two digits (00-99), as NRI requires; got {index!r}")
    if not os.path.isabs(python) or not os.access(python, os.X_OK):
        raise InstallError(f"python interpreter {python!r} is not an executable absolute path")
    _check_config(config)
    problems = _conflicts(paths)
    if problems:
        raise InstallError(
            "refusing to install the pre-installed plugin: another nri-pinner would claim the same "
            "cpusets and every container create would fail:\n  " + "\n  ".join(problems)
        )
    plugin_dir.mkdir(parents=True, exist_ok=True)
    target = plugin_dir / f"{index}-{PLUGIN_NAME}"
    if target.exists() and target not in _our_launchers(plugin_dir):
        raise InstallError(f"{target} exists and was not written by nri-pinner install; not overwriting it")
    _write_atomic(target, launcher_text(python, str(config)), 0o755)
    for old in _our_launchers(plugin_dir):
        if old != target:  # a reinstall under another index replaces the old launcher
            old.unlink()
            print(f"removed the launcher of a previous install: {old}", file=out)
    paths.marker.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(paths.marker, f"launcher={target}\n", 0o644)
    print(f"installed pre-installed NRI plugin launcher {target}", file=out)
    print(f"  runs: {python} -m nri_pinner run --config {config}", file=out)
    hint = _log_file_hint(config)
    if hint:
        print(hint, file=out)
    print(ENABLE_NRI_HELP.format(plugin_dir=plugin_dir), file=out)


def _check_config(config: Path) -> None:
    """containerd discards a pre-installed plugin's output: a config `run` would refuse must be refused
    here, where the operator sees why (the same checks as `run` and `config --check`)."""
    from ..config import ConfigError
    from ..config.validate import check_file

    if not config.is_file():
        raise InstallError(f"{config} does not exist: create it first (nri-pinner config --defaults > {config}), "
                           f"then check it with `nri-pinner config --check {config}`")
    try:
        check_file(config)
    except ConfigError as exc:
        raise InstallError(f"not installing: the plugin would exit at once on this config, and containerd "
                           f"discards its output:\n{exc}\nfix it, then check it with "
                           f"`nri-pinner config --check {config}`") from exc


def do_uninstall(plugin_dir: Path, index: str, paths: HostPaths, out: TextIO) -> None:
    launchers = _our_launchers(plugin_dir) if plugin_dir.is_dir() else []
    for path in launchers:
        path.unlink()
        print(f"removed {path}", file=out)
    paths.marker.unlink(missing_ok=True)
    if not launchers:
        print(f"no nri-pinner launcher in {plugin_dir} (index {index} or any other); nothing removed", file=out)
        return
    print("restart containerd to stop the running plugin: systemctl restart containerd", file=out)


def install(
    plugin_dir: str,
    index: str,
    config: str | None,
    uninstall: bool = False,
    *,
    python: str | None = None,
    paths: HostPaths | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Install (or remove) the launcher ``<plugin_dir>/<index>-nri-pinner``; 0 on success, 2 on refusal.
    ``config`` None: the default config path (under the install root when one is set)."""
    from ..config import CONFIG_PATH

    out = out or sys.stdout
    err = err or sys.stderr
    plugins = Path(plugin_dir)
    if config is None:
        config = CONFIG_PATH
        if paths is None and os.environ.get(ROOT_ENV):
            config = str(Path(os.environ[ROOT_ENV]) / CONFIG_PATH.lstrip("/"))
    if paths is None:
        paths = HostPaths.from_env()
        if os.environ.get(ROOT_ENV):  # the whole host is redirected, the plugin directory and config too
            plugins = paths.root / plugin_dir.lstrip("/")
    try:
        if uninstall:
            do_uninstall(plugins, index, paths, out)
        else:
            do_install(plugins, index, Path(os.path.abspath(config)), python or sys.executable, paths, out)
    except InstallError as exc:
        print(f"nri-pinner install: {exc}", file=err)
        return 2
    except OSError as exc:
        print(f"nri-pinner install: {exc.strerror}: {exc.filename}", file=err)
        return 2
    return 0
