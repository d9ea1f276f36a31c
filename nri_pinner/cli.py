"""The `nri-pinner` command line: run the plugin, inspect it, plan with `simulate`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import __version__
from .config import CONFIG_PATH


def _add_sysfs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sysfs", metavar="ROOT", default=None,
                   help="read /sys/devices/system under ROOT instead of the config's sysfs_root")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nri-pinner", description=__doc__)
    parser.add_argument("--version", action="version", version=f"nri-pinner {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the NRI plugin (external or pre-installed mode)")
    run.add_argument("--config", default=CONFIG_PATH, help="TOML config file (default: %(default)s)")

    status = sub.add_parser("status", help="show assignments, pools and a CPU map from a running plugin")
    status.add_argument("--socket", default=None, help="inspection socket (default: from the config)")
    status.add_argument("--config", default=CONFIG_PATH)
    status.add_argument("--json", action="store_true", help="print the raw JSON document")

    topo = sub.add_parser("topology", help="print the discovered CPU topology")
    _add_sysfs(topo)
    topo.add_argument("--json", action="store_true", help="JSON in the shape `simulate` reads")

    sim = sub.add_parser("simulate", help="dry-run a scenario of creates/removes on a node shape")
    sim.add_argument("scenario", help="scenario JSON file ('-' for stdin)")
    _add_sysfs(sim)

    cfg = sub.add_parser("config", help="check a config file, or print the embedded defaults")
    cfg.add_argument("--check", metavar="FILE", help="validate FILE and print the effective settings")
    cfg.add_argument("--defaults", action="store_true", help="print the default config file")

    inst = sub.add_parser("install", help="install as a pre-installed NRI plugin launched by containerd")
    inst.add_argument("--plugin-dir", default="/opt/nri/plugins")
    inst.add_argument("--index", default="90")
    inst.add_argument("--config", default=CONFIG_PATH)
    inst.add_argument("--uninstall", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            from .service.app import run_from_config

            return run_from_config(args.config)
        if args.command == "status":
            from .inspect_cli import status

            return status(args.socket, args.config, as_json=args.json)
        if args.command == "topology":
            return _topology(args.sysfs or "/", as_json=args.json)
        if args.command == "simulate":
            from .simulate import run_scenario_file

            return run_scenario_file(args.scenario, args.sysfs, sys.stdout)
        if args.command == "config":
            return _config(args.check, args.defaults)
        if args.command == "install":
            from .install import install

            return install(args.plugin_dir, args.index, args.config, uninstall=args.uninstall)
    except KeyboardInterrupt:
        return 130
    except CLIError as exc:
        print(f"nri-pinner {args.command}: {exc}", file=sys.stderr)
        return 2
    return 2


class CLIError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


def _topology(root: str, as_json: bool) -> int:
    """Print what discovery found plus its repairs; only an unreadable root fails (exit 2)."""
    from .engine.topology.sysfs import SysfsError, discover_with_warnings
    from .engine.topology.view import render_topology

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


def _config(check: str | None, defaults: bool) -> int:
    from importlib.resources import files

    from .config import ConfigError, load_file

    if defaults or not check:
        sys.stdout.write(files("nri_pinner.config").joinpath("default.toml").read_text())
        return 0
    try:
        settings = load_file(check)
    except ConfigError as exc:
        raise CLIError(str(exc)) from exc
    print(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
