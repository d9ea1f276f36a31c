"""The one validation path shared by `config --check`, `run`, `install` and the unit's pre-start check:
the file (syntax, every key: settings.py), then, on the node, what `run` would refuse on this host —
the CPU topology under sysfs_root must be readable, the reserved CPUs online, the policy options a
combination the kubelet accepts — by building the engine exactly as `run` does. Every problem is
reported at once, with the line of the key it is about.

Also renders the effective settings as TOML (read back by `load` to the same settings) or JSON."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import socket
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..engine.cpuset import CPUSet
from .positions import key_positions, locate
from .problems import ConfigError, Problem
from .settings import Settings, load

# Host errors carry no key: the words of the engine's message say which key it is about.
_HOST_KEYS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("reserve",), ("cpu_manager", "reserved_cpus")),
    (("topology manager policy",), ("topology_manager", "policy")),
    (("option",), ("cpu_manager", "policy_options")),
)


def _host_key(message: str, settings: Settings) -> tuple[str, ...]:
    for words, path in _HOST_KEYS:
        if any(w in message for w in words):
            if path[-1] == "reserved_cpus" and settings.cpu_manager.reserved_cpus is None:
                return ("cpu_manager", "reserved_cpu_count")
            return path
    return ("cpu_manager",)


def host_problems(settings: Settings, source: str) -> list[Problem]:
    """What `run` would refuse on this host (the same calls: discover, then Engine.from_settings)."""
    from ..engine.admission_engine import Engine
    from ..engine.errors import EngineError
    from ..engine.topology.sysfs import SysfsError, discover

    problems: list[Problem] = []
    if settings.metrics.enabled and (unresolved := resolve_problem(settings.metrics.address)):
        problems.append(Problem(source, ("metrics", "address"), unresolved))
    try:
        topology = discover(settings.sysfs_root)
    except (SysfsError, OSError) as exc:
        return [*problems, Problem(source, ("sysfs_root",), f"cannot read the CPU topology under "
                                   f"{settings.sysfs_root!r} on this host: {exc}")]
    settings = _engine_only(settings)
    cm = settings.cpu_manager
    # The engine stops at its first objection: try again without the options and without the
    # reservation, so that neither hides a problem with the other.
    attempts: list[Callable[[], Settings]] = [
        lambda: replace(settings, cpu_manager=replace(cm, policy_options=frozenset())),
        lambda: replace(settings, cpu_manager=replace(cm, reserved_cpus=None, reserved_cpu_count=0)),
        lambda: settings,
    ]
    seen: set[str] = set()
    for attempt in attempts:
        try:
            Engine.from_settings(attempt(), topology)
        except (EngineError, ValueError) as exc:
            if str(exc) not in seen:
                seen.add(str(exc))
                problems.append(Problem(source, _host_key(str(exc), settings), f"on this host: {exc}"))
    return problems


def reserved_warnings(reserved: CPUSet, online: CPUSet) -> list[str]:
    """What is accepted but leaves nothing to pin (warned by `config --check` and at `run`'s start)."""
    if online and online.issubset(reserved):
        return [f"the reserved CPUs ({reserved}) are every online CPU ({online}): no CPU can be given to a "
                "container exclusively, every Guaranteed container with whole CPUs is refused (or kept "
                "shared, nri.on_reject) and every other container runs on the reserved CPUs"]
    return []


def quota_warnings(settings: Settings) -> list[str]:
    """What `cpu_manager.disable_cpu_quota_with_exclusive_cpus` cannot do with this config (`run` says it
    once, at the first exclusive container: core/quotas.py)."""
    if settings.cpu_manager.disable_cpu_quota_with_exclusive_cpus and not settings.reconcile.cgroup_writes:
        return ["cpu_manager.disable_cpu_quota_with_exclusive_cpus with reconcile.cgroup_writes = false: exclusive "
                "containers run without their own CFS quota, but their pods' cgroups keep the kubelet's (only a "
                "cgroup pass removes it)"]
    return []


def host_warnings(settings: Settings) -> list[str]:
    """Warnings about a valid config on this host (see `reserved_warnings`, `quota_warnings`); none about
    the CPUs when the host's checks fail (those are errors, reported by `host_problems`)."""
    from ..engine.admission_engine import Engine
    from ..engine.errors import EngineError
    from ..engine.topology.sysfs import SysfsError, discover

    try:
        topology = discover(settings.sysfs_root)
        engine = Engine.from_settings(_engine_only(settings), topology)
    except (SysfsError, OSError, EngineError, ValueError):
        return quota_warnings(settings)
    return reserved_warnings(engine.policy.reserved, topology.online) + quota_warnings(settings)


def _engine_only(settings: Settings) -> Settings:
    """Without the providers that have sources of their own (memory capacities, NIC lookups, the
    kubelet's PodResources): `run` wires those up; the engine's checks need only the others."""
    return replace(settings, hints=replace(settings.hints, providers=tuple(
        p for p in settings.hints.providers if p in ("cpu", "devices"))))


def check_text(text: str, source: str, host: bool = True) -> Settings:
    """Settings from a config text, or ConfigError listing every problem (host ones when `host`)."""
    settings = load(text, source)
    if host:
        problems = host_problems(settings, source)
        if problems:
            where = key_positions(text)
            raise ConfigError([p.at(*(locate(where, p.path) or (None, None))) for p in problems])
    return settings


def check_file(path: str | Path, host: bool = True) -> Settings:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text: {exc}") from exc
    return check_text(text, str(p), host)


# -- the effective settings as data ------------------------------------------------------------------

def as_data(value: Any) -> Any:
    """Settings → plain data in the config file's own shapes (CPU sets as "0-3" strings, option sets as
    sorted lists); None (unset) is left out, as the file has no null."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = as_data(getattr(value, f.name))
            if item is not None:
                out[f.name] = item
        return out
    if isinstance(value, frozenset | set):
        return sorted(as_data(v) for v in value)
    if isinstance(value, tuple | list):
        return [as_data(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): as_data(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)  # CPUSet and other value types print in their config syntax


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _toml_key(key: str) -> str:
    return key if key and all(c.isalnum() or c in "_-" for c in key) else json.dumps(key)


def _toml_table(data: Mapping[str, Any], name: str, out: list[str]) -> None:
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    if name and (scalars or not tables):
        out.append(f"\n[{name}]")
    out.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars.items())
    for key, sub in tables.items():
        _toml_table(sub, f"{name}.{_toml_key(key)}" if name else _toml_key(key), out)


def to_toml(settings: Settings) -> str:
    data = as_data(settings)
    if settings.cpu_manager.reserved_cpus is None:  # unset is written as the file writes it: ""
        data["cpu_manager"] = {"reserved_cpus": "", **data["cpu_manager"]}
    out = ["# effective nri-pinner settings (nri-pinner config --check)"]
    _toml_table(data, "", out)
    return "\n".join(out).strip() + "\n"


def to_json(settings: Settings) -> str:
    return json.dumps(as_data(settings), indent=1, sort_keys=False)


def resolve_problem(host: str) -> str | None:
    """A host name's lookup on this host (an IP address needs none)."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"on this host: {host!r} does not resolve: {exc.strerror or exc}"
    return None
