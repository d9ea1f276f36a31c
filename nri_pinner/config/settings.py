"""TOML config → frozen settings. Unknown keys and bad values are errors naming file, key and reason.

Every key and its default is listed in the README ("Configuration reference"); `nri-pinner config
--defaults` prints the embedded default file, which is the same table in TOML.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..engine.cpuset import CPUSet, CPUSetError

CONFIG_PATH = "/etc/nri-pinner/config.toml"

CPU_POLICY_OPTIONS = (
    "full-pcpus-only",
    "distribute-cpus-across-numa",
    "align-by-socket",
    "distribute-cpus-across-cores",
    "strict-cpu-reservation",
    "prefer-align-cpus-by-uncorecache",
)
TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
TOPOLOGY_SCOPES = ("container", "pod")
TOPOLOGY_OPTIONS = ("prefer-closest-numa-nodes",)
HINT_PROVIDERS = ("cpu",)
# Accepted names that are planned but not built: refused with "not implemented yet", never ignored.
NOT_IMPLEMENTED = {
    ("topology_manager", "policy_options", "max-allowable-numa-nodes"):
        "max-allowable-numa-nodes is not needed (any NUMA count is supported) and not implemented",
    ("hints", "providers", "devices"): "device hints are not implemented yet",
    ("hints", "providers", "nics"): "NIC hints are not implemented yet",
}


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file, the key and the reason."""


@dataclass(frozen=True)
class CPUManagerSettings:
    reserved_cpus: CPUSet | None = None  # explicit list wins over the count
    reserved_cpu_count: int = 0
    policy_options: frozenset[str] = frozenset()
    isolated_cpus: str = "exclusive-first"  # or "unused"


@dataclass(frozen=True)
class TopologyManagerSettings:
    policy: str = "none"
    scope: str = "container"
    policy_options: frozenset[str] = frozenset()


@dataclass(frozen=True)
class HintSettings:
    providers: tuple[str, ...] = ("cpu",)


@dataclass(frozen=True)
class NRISettings:
    socket: str = "/var/run/nri/nri.sock"
    plugin_name: str = "nri-pinner"
    plugin_index: str = "90"
    on_reject: str = "fail"  # "fail" the create, or "shared" = fail open onto the shared pool
    on_timeout: str = "shared"  # what a create gets when the decision overruns its budget
    budget_margin_ms: int = 400  # answer this long before the runtime's request timeout
    reconnect_max_seconds: float = 10.0


@dataclass(frozen=True)
class ReconcileSettings:
    period_seconds: float = 10.0  # 0 disables the timer
    cri_socket: str = "/run/containerd/containerd.sock"
    cgroup_root: str = "/sys/fs/cgroup"
    cgroup_writes: bool = True  # pool changes written to cgroups directly; false = NRI updates only


@dataclass(frozen=True)
class StateSettings:
    checkpoint: str = "/var/lib/nri-pinner/checkpoint.json"


@dataclass(frozen=True)
class InspectSettings:
    socket: str = "/run/nri-pinner/nri-pinner.sock"


@dataclass(frozen=True)
class MetricsSettings:
    enabled: bool = False
    address: str = "127.0.0.1"
    port: int = 9766


@dataclass(frozen=True)
class LogSettings:
    level: str = "info"
    format: str = "auto"  # auto = readable on a terminal, JSON otherwise
    file: str = ""  # pre-installed plugins have no stdout: log here (empty = stderr)


@dataclass(frozen=True)
class Settings:
    sysfs_root: str = "/"
    cpu_manager: CPUManagerSettings = field(default_factory=CPUManagerSettings)
    topology_manager: TopologyManagerSettings = field(default_factory=TopologyManagerSettings)
    hints: HintSettings = field(default_factory=HintSettings)
    nri: NRISettings = field(default_factory=NRISettings)
    reconcile: ReconcileSettings = field(default_factory=ReconcileSettings)
    state: StateSettings = field(default_factory=StateSettings)
    inspect: InspectSettings = field(default_factory=InspectSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    log: LogSettings = field(default_factory=LogSettings)


T = TypeVar("T")


class _Reader:
    """Pops typed keys out of one table, so leftovers are exactly the unknown keys."""

    def __init__(self, source: str, section: str, table: Mapping[str, Any]) -> None:
        self.source, self.section, self.table = source, section, dict(table)

    def fail(self, key: str, reason: str) -> ConfigError:
        where = f"{self.section}.{key}" if self.section else key
        return ConfigError(f"{self.source}: {where}: {reason}")

    def get(self, key: str, kind: type[T], default: T, check: Callable[[T], str | None] | None = None) -> T:
        if key not in self.table:
            return default
        value = self.table.pop(key)
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise self.fail(key, f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
        if check is not None and (problem := check(value)):
            raise self.fail(key, problem)
        return value  # type: ignore[no-any-return]

    def choice(self, key: str, default: str, allowed: tuple[str, ...]) -> str:
        return self.get(key, str, default, lambda v: None if v in allowed else
                        f"must be one of {', '.join(allowed)}; got {v!r}")

    def names(self, key: str, allowed: tuple[str, ...], default: tuple[str, ...] = ()) -> tuple[str, ...]:
        raw = self.get(key, list, list(default))
        out: list[str] = []
        for item in raw:
            if not isinstance(item, str):
                raise self.fail(key, f"entries must be strings; got {item!r}")
            planned = NOT_IMPLEMENTED.get((self.section, key, item))
            if planned:
                raise self.fail(key, f"{item!r}: {planned}")
            if item not in allowed:
                raise self.fail(key, f"unknown value {item!r}; known: {', '.join(allowed)}")
            if item in out:
                raise self.fail(key, f"{item!r} listed twice")
            out.append(item)
        return tuple(out)

    def done(self) -> None:
        if self.table:
            raise self.fail(sorted(self.table)[0], "unknown key")


def _non_negative(v: float) -> str | None:
    return "must not be negative" if v < 0 else None


def load(text: str, source: str = "<config>") -> Settings:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    return _parse(data, source)


def from_mapping(data: Mapping[str, Any], source: str = "<config>") -> Settings:
    """The same validation for a mapping that did not come from a TOML file (simulate's "config")."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a table of settings, got {type(data).__name__}")
    return _parse(data, source)


def load_file(path: str | Path) -> Settings:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config: {exc.strerror or exc}") from exc
    return load(text, str(p))


def _section(root: _Reader, name: str) -> _Reader:
    table = root.get(name, dict, {})
    return _Reader(root.source, name, table)


def _parse(data: Mapping[str, Any], source: str) -> Settings:
    root = _Reader(source, "", data)
    sysfs_root = root.get("sysfs_root", str, "/")

    r = _section(root, "cpu_manager")
    r.get("policy", str, "static", lambda v: None if v == "static" else
          f"only 'static' is implemented; got {v!r}")
    reserved_text = r.get("reserved_cpus", str, "")
    try:
        reserved = CPUSet.parse(reserved_text) if reserved_text.strip() else None
    except CPUSetError as exc:
        raise r.fail("reserved_cpus", str(exc)) from exc
    count = r.get("reserved_cpu_count", int, 0, lambda v: _non_negative(v))
    if reserved is not None and count:
        raise r.fail("reserved_cpu_count", "set either reserved_cpus or reserved_cpu_count, not both")
    cpu = CPUManagerSettings(
        reserved_cpus=reserved, reserved_cpu_count=count,
        policy_options=frozenset(r.names("policy_options", CPU_POLICY_OPTIONS)),
        isolated_cpus=r.choice("isolated_cpus", "exclusive-first", ("exclusive-first", "unused")),
    )
    r.done()

    r = _section(root, "topology_manager")
    topo = TopologyManagerSettings(
        policy=r.choice("policy", "none", TOPOLOGY_POLICIES),
        scope=r.choice("scope", "container", TOPOLOGY_SCOPES),
        policy_options=frozenset(r.names("policy_options", TOPOLOGY_OPTIONS)),
    )
    r.done()

    r = _section(root, "hints")
    hints = HintSettings(providers=r.names("providers", HINT_PROVIDERS, ("cpu",)))
    if "cpu" not in hints.providers:
        raise r.fail("providers", "the 'cpu' provider cannot be turned off")
    r.done()

    r = _section(root, "nri")
    d = NRISettings()
    nri = NRISettings(
        socket=r.get("socket", str, d.socket),
        plugin_name=r.get("plugin_name", str, d.plugin_name, _plugin_name_problem),
        plugin_index=r.get("plugin_index", str, d.plugin_index, lambda v: None if len(v) == 2 and v.isdigit()
                           else f"must be exactly two digits; got {v!r}"),
        on_reject=r.choice("on_reject", d.on_reject, ("fail", "shared")),
        on_timeout=r.choice("on_timeout", d.on_timeout, ("shared", "fail")),
        budget_margin_ms=r.get("budget_margin_ms", int, d.budget_margin_ms,
                               lambda v: None if 50 <= v <= 1500 else "must be between 50 and 1500"),
        reconnect_max_seconds=r.get("reconnect_max_seconds", float, d.reconnect_max_seconds,
                                    lambda v: None if 0.1 <= v <= 300 else "must be between 0.1 and 300"),
    )
    r.done()

    r = _section(root, "reconcile")
    rd = ReconcileSettings()
    rec = ReconcileSettings(
        period_seconds=r.get("period_seconds", float, rd.period_seconds, _non_negative),
        cri_socket=r.get("cri_socket", str, rd.cri_socket),
        cgroup_root=r.get("cgroup_root", str, rd.cgroup_root),
        cgroup_writes=r.get("cgroup_writes", bool, rd.cgroup_writes),
    )
    r.done()

    r = _section(root, "state")
    state = StateSettings(checkpoint=r.get("checkpoint", str, StateSettings().checkpoint,
                                           lambda v: None if v else "must not be empty"))
    r.done()

    r = _section(root, "inspect")
    inspect = InspectSettings(socket=r.get("socket", str, InspectSettings().socket))
    r.done()

    r = _section(root, "metrics")
    md = MetricsSettings()
    metrics = MetricsSettings(
        enabled=r.get("enabled", bool, md.enabled),
        address=r.get("address", str, md.address),
        port=r.get("port", int, md.port, lambda v: None if 0 < v < 65536 else "must be a TCP port (1-65535)"),
    )
    r.done()

    r = _section(root, "log")
    log = LogSettings(
        level=r.choice("level", "info", ("debug", "info", "warning", "error")),
        format=r.choice("format", "auto", ("auto", "json", "console")),
        file=r.get("file", str, ""),
    )
    r.done()
    root.done()
    return Settings(sysfs_root=sysfs_root, cpu_manager=cpu, topology_manager=topo, hints=hints, nri=nri,
                    reconcile=rec, state=state, inspect=inspect, metrics=metrics, log=log)


def _plugin_name_problem(v: str) -> str | None:
    if not v or any(not (ch.isalnum() or ch in "_.+-") for ch in v):
        return f"must be non-empty and use only letters, digits and _.+- ; got {v!r}"
    return None
