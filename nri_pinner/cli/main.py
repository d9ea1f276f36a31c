"""The `nri-pinner` command line: run the plugin, inspect it, plan with `simulate`."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections.abc import Sequence

from .. import __version__
from ..config import CONFIG_PATH

# The documented exit statuses (README, man page): scripts and the systemd unit rely on them
# (RestartPreventExitStatus=2: a bad config is not retried).
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NOT_CONNECTED = 0, 1, 2, 3
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_FAILURE: "failure at run time (the plugin stopped on an error, output could not be written, ...)",
    EXIT_USAGE: "usage or configuration error: bad arguments, an invalid config file, a refused install",
    EXIT_NOT_CONNECTED: "status: not connected (the plugin could not be reached, or it is not connected to the "
                        "runtime's NRI socket: containers are created without its cpusets meanwhile)",
}
NOT_RUNNING_HINT = (
    "is nri-pinner running? systemctl status nri-pinner "
    "(pre-installed mode: containerd discards its output, its log is the config's log.file; "
    "DaemonSet: kubectl -n nri-pinner get pods)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nri-pinner", description=__doc__,
        epilog="exit status: 0 success, 1 failure, 2 usage or config error, 3 not connected (status); "
               "see nri-pinner(1)",
    )
    parser.add_argument("--version", action="version", version=f"nri-pinner {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the NRI plugin (external or pre-installed mode)")
    run.add_argument("--config", default=CONFIG_PATH, help="TOML config file (default: %(default)s)")

    status = sub.add_parser("status", help="show assignments, pools and a CPU map from a running plugin")
    status.add_argument("--socket", default=None, help="inspection socket (default: from the config)")
    status.add_argument("--config", default=CONFIG_PATH,
                        help="config file whose [inspect] socket is used when --socket is not given "
                             "(default: %(default)s)")
    status.add_argument("--json", action="store_true", help="print the raw JSON document")

    topo = sub.add_parser("topology", help="print the discovered CPU topology")
    topo.add_argument("--sysfs", metavar="ROOT", default="/",
                      help="read ROOT/sys/devices/system (default: %(default)s, this host; "
                           "the config file is not read)")
    topo.add_argument("--json", action="store_true", help="JSON in the shape `simulate` reads")

    sim = sub.add_parser("simulate", help="dry-run a scenario of creates/removes on a node shape")
    sim.add_argument("scenario", help="scenario JSON file ('-' for stdin)")
    sim.add_argument("--sysfs", metavar="ROOT", default=None,
                     help="node shape from ROOT/sys/devices/system, for a scenario without a \"topology\" "
                          "object (the scenario's own \"config\" is used; no config file or sysfs_root is read)")

    cfg = sub.add_parser("config", help="check a config file, or print the embedded defaults")
    what = cfg.add_mutually_exclusive_group()
    what.add_argument("--check", metavar="FILE",
                      help="validate FILE as `run` would (every error, with its line; warnings on stderr) and "
                           "print the effective settings as TOML")
    what.add_argument("--defaults", action="store_true", help="print the default config file (the default action)")
    cfg.add_argument("--json", action="store_true", help="with --check: print the effective settings as JSON")
    cfg.add_argument("--quiet", action="store_true",
                     help="with --check: print nothing when the file is valid (the systemd unit's pre-start check)")
    cfg.add_argument("--no-host", action="store_true",
                     help="with --check: skip the checks against this host (sysfs readable, reserved CPUs "
                          "online, policy options); for a file meant for another node")

    nic = sub.add_parser("nic-lookup-server", help="serve pod network namespaces' links to the plugin "
                         "(the one process holding CAP_SYS_ADMIN; README \"NIC alignment\")")
    nic.add_argument("--socket", default=None, help="unix socket to listen on (default: "
                     "$NRI_PINNER_NIC_LOOKUP_SOCKET, else /run/nri-pinner-nic-lookup/nic-lookup.sock)")

    inst = sub.add_parser("install", help="install as a pre-installed NRI plugin launched by containerd")
    inst.add_argument("--plugin-dir", default="/opt/nri/plugins", metavar="DIR",
                      help="containerd's NRI plugin_path (default: %(default)s; "
                           "under $NRI_PINNER_INSTALL_ROOT when that is set)")
    inst.add_argument("--index", default="90", metavar="NN",
                      help="two-digit NRI plugin index, the launcher's name prefix (default: %(default)s)")
    inst.add_argument("--config", default=None,
                      help="config file the launcher runs with; it must pass `config --check` "
                           f"(default: {CONFIG_PATH}; under $NRI_PINNER_INSTALL_ROOT when that is set)")
    inst.add_argument("--uninstall", action="store_true",
                      help="remove the launcher and the marker that keeps the systemd unit from starting")

    nri = sub.add_parser("enable-nri", help="enable NRI in containerd's config file (containerd 1.7 ships it off)")
    nri.add_argument("--containerd-config", default="/etc/containerd/config.toml", metavar="FILE",
                     help="containerd's config, edited in place with the original kept beside it as "
                          "FILE.<time>.nri-pinner-backup; created when missing (default: %(default)s)")
    nri.add_argument("--restart", action="store_true",
                     help="then restart containerd through systemd's D-Bus API if NRI's socket does not answer")
    nri.add_argument("--unit", default="containerd.service", help="the unit --restart restarts (default: %(default)s)")
    nri.add_argument("--systemd-bus", default="/run/systemd/private", metavar="SOCKET",
                     help="systemd's private socket or the system bus socket, for --restart (default: %(default)s)")
    nri.add_argument("--dry-run", action="store_true", help="print the edit as a diff; write nothing")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except KeyboardInterrupt:
        return 130
    except CLIError as exc:
        print(f"nri-pinner {args.command}: {exc}", file=sys.stderr)
        return exc.status
    except BrokenPipeError:
        # The reader went away (`topology --json | head -1`): no traceback, and none at exit either
        # when Python flushes stdout into the closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        from ..edge.app import run_from_config

        return run_from_config(args.config)
    if args.command == "status":
        from .status import status

        sock = _inspect_socket(args.socket, args.config)
        _check_reachable(sock)
        return status(sock, args.config, as_json=args.json)
    if args.command == "topology":
        return _topology(args.sysfs, as_json=args.json)
    if args.command == "simulate":
        from .simulate import run_scenario_file

        return run_scenario_file(args.scenario, args.sysfs, sys.stdout)
    if args.command == "config":
        return _config(args.check, args.defaults, as_json=args.json, quiet=args.quiet, host=not args.no_host)
    if args.command == "nic-lookup-server":
        from ..edge.nic_lookup.server import serve_main

        return serve_main(args.socket)
    if args.command == "install":
        from .install import install

        return install(args.plugin_dir, args.index, args.config, uninstall=args.uninstall)
    if args.command == "enable-nri":
        from .enable_nri import enable_nri

        return enable_nri(args.containerd_config, args.restart, args.unit, args.systemd_bus, args.dry_run,
                          out=sys.stdout, err=sys.stderr)
    raise CLIError(f"unknown command {args.command!r}")


def _inspect_socket(given: str | None, config_path: str) -> str:
    """--socket, else the config's [inspect] socket. A config with errors elsewhere still names its socket
    (the plugin may run on an earlier version of the file); one that cannot be read gives the default
    socket. Either is said on stderr; only a missing default config (the embedded defaults) is not."""
    if given is not None:
        return given
    import tomllib

    from ..config import ConfigError, InspectSettings, load_file

    default = InspectSettings().socket
    try:
        return load_file(config_path).inspect.socket
    except ConfigError as exc:
        if config_path == CONFIG_PATH and not os.path.exists(config_path):
            return default
        first = str(exc).splitlines()[0]
    check = f"see `nri-pinner config --check {config_path}`"
    try:
        with open(config_path, "rb") as f:
            table = tomllib.load(f).get("inspect", {})
        sock = table.get("socket", default) if isinstance(table, dict) else default
    except (OSError, tomllib.TOMLDecodeError):
        print(f"nri-pinner status: {config_path} cannot be read ({first}); trying the default socket {default}",
              file=sys.stderr)
        return default
    if not isinstance(sock, str):
        sock = default
    print(f"nri-pinner status: {config_path} has errors ({first}; {check}); using its [inspect] socket {sock}",
          file=sys.stderr)
    return sock


def _check_reachable(path: str) -> None:
    """A plain connect() first: gRPC's own failure text (UNAVAILABLE: failed to connect to all
    addresses...) does not tell an operator what to do."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(path)
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise CLIError(f"cannot reach the plugin at {path}: {reason}; {NOT_RUNNING_HINT}",
                           EXIT_NOT_CONNECTED) from exc


class CLIError(Exception):
    """A user-facing failure: printed as one line; exit status 2 (usage/config) unless told."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


def _topology(root: str, as_json: bool) -> int:
    """Print what discovery found plus its repairs; only an unreadable root fails (exit 2)."""
    from ..engine.topology.sysfs import SysfsError, discover_with_warnings
    from ..engine.topology.view import render_topology

    try:
        found = discover_with_warnings(root)
    except SysfsError as exc:
        raise CLIError(str(exc)) from exc
    if as_json:
        out = found.topology.to_json()
        out["repairs"] = list(found.warnings)
        out["sources"] = found.sources
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0
    print(render_topology(found.topology), end="")
    print("sources: " + ", ".join(f"{k} from {v}" for k, v in found.sources.items()))
    for warning in found.warnings:
        print(f"repaired: {warning}")
    return 0


def _config(check: str | None, defaults: bool, as_json: bool = False, quiet: bool = False,
            host: bool = True) -> int:
    from importlib.resources import files

    from ..config import ConfigError
    from ..config.validate import check_file, to_json, to_toml

    if defaults or not check:
        sys.stdout.write(files("nri_pinner.config").joinpath("default.toml").read_text())
        return EXIT_OK
    try:
        settings = check_file(check, host=host)
    except ConfigError as exc:
        lines = str(exc).splitlines()
        print("\n".join(lines), file=sys.stderr)
        count = max(len(exc.problems), 1)
        raise CLIError(f"{count} error{'s' if count > 1 else ''} in {check}; `nri-pinner run` would refuse it") from exc
    if host:
        from ..config.validate import host_warnings

        for warning in host_warnings(settings):
            print(f"warning: {check}: {warning}", file=sys.stderr)
    if not quiet:
        sys.stdout.write(to_json(settings) + "\n" if as_json else to_toml(settings))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
