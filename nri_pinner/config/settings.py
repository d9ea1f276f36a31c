"""TOML config → frozen settings; bad keys and values are errors naming file, line, key and reason, all
at once (problems.py; validate.py: host checks). Keys are read with a section's `_Reader`, the one path of
`config --check`, `run`, `install` and the unit's pre-start check. Keys, defaults: README, `config --defaults`.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from ..engine.cpumanager.releases import DEFAULT_RELEASE, POST_RELEASE_FIXES, release_of, release_problem
from ..engine.cpuset import CPUSet, CPUSetError
from . import checks
from .checks import metrics_address_problem, off_or_seconds_problem, plugin_name_problem, reserved_memory_problem
from .checks import seconds_problem as _seconds_problem
from .policy_options import MIN_MAX_ALLOWABLE_NUMA_NODES, parse_option_table
from .positions import key_positions, locate
from .problems import ConfigError, Problem, did_you_mean, syntax_problem

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
HINT_PROVIDERS = ("cpu", "devices", "memory", "nics", "podresources")
# Accepted names that are planned but not built: refused with "not implemented yet", never ignored.
NOT_IMPLEMENTED: dict[tuple[str, str, str], str] = {
    ("cpu_manager", "post_release_fixes", pr): f"not implemented yet ({what})"
    for pr, what in POST_RELEASE_FIXES.items()
}


@dataclass(frozen=True)
class CPUManagerSettings:
    reserved_cpus: CPUSet | None = None  # explicit list wins over the count
    policy: str = "static"  # the only one implemented (the kubelet's "none" is nri-pinner not running)
    reserved_cpu_count: int = 0
    policy_options: frozenset[str] = frozenset()
    isolated_cpus: str = "exclusive-first"  # or "unused"
    core_kinds: str = "prefer-same"  # hybrid CPUs: "mixed" | "prefer-same" | "strict"
    kubelet_version: str = DEFAULT_RELEASE  # the release whose placements the allocator follows (releases.py)
    post_release_fixes: tuple[str, ...] = ()  # upstream fixes merged after it, by PR (none built: all refused)
    # the kubelet's DisableCPUQuotaWithExclusiveCPUs (beta, on since 1.33): exclusive containers and their
    # pods run without a CFS quota (README "Configuration reference"; core/quotas.py)
    disable_cpu_quota_with_exclusive_cpus: bool = True


@dataclass(frozen=True)
class TopologyManagerSettings:
    policy: str = "none"
    scope: str = "container"
    policy_options: frozenset[str] = frozenset()
    # the kubelet's limit, accepted for pasted configs; we need none (see Engine.notes)
    max_allowable_numa_nodes: int | None = None
    # the kubelet's PodLevelResourceManagers gate (1.36 alpha, off): only false is accepted (checks.py)
    pod_level_resource_managers: bool = False


@dataclass(frozen=True)
class HintSettings:
    providers: tuple[str, ...] = ("cpu",)


@dataclass(frozen=True)
class MemoryManagerSettings:
    # the kubelet's --reserved-memory form, "0:memory=1Gi,hugepages-2Mi=64Mi;1:memory=1Gi" (bytes per node)
    reserved_memory: str = ""
    mems: str = "aligned"  # Burstable/BestEffort cpuset.mems: NUMA nodes of their CPUs, or "all" nodes


@dataclass(frozen=True)
class PodResourcesSettings:  # the "podresources" provider: the kubelet's PodResources API
    socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    refresh_seconds: float = 10.0  # List + GetAllocatableResources on this timer (and List on RunPodSandbox)
    timeout_seconds: float = 2.0  # deadline of one call


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
    cgroup_v1_skip_rebuilds: bool = True  # v1: clear written containers' cpuset.sched_load_balance
    systemd_bus: str = "/run/systemd/private"  # systemd scopes told their written cpusets; "" = off
    systemd_timeout_seconds: float = 0.5  # one pass's wait for systemd's answers
    systemd_pool_on_qos_slices: bool = False  # v2 + systemd: pool on the QoS slices (docs/systemd-pool-design.md)
    runtime_record_quiet_seconds: float = 1.0  # pool quiet this long: update the runtime's stale records; 0 = off


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
    memory_manager: MemoryManagerSettings = field(default_factory=MemoryManagerSettings)
    podresources: PodResourcesSettings = field(default_factory=PodResourcesSettings)
    nri: NRISettings = field(default_factory=NRISettings)
    reconcile: ReconcileSettings = field(default_factory=ReconcileSettings)
    state: StateSettings = field(default_factory=StateSettings)
    inspect: InspectSettings = field(default_factory=InspectSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    log: LogSettings = field(default_factory=LogSettings)


T = TypeVar("T")


class _Reader:
    """Pops typed keys out of one table, so leftovers are exactly the unknown keys. A bad value is
    reported (shared list, all sections) and replaced by its default, so parsing goes on."""

    def __init__(self, source: str, section: str, table: Mapping[str, Any],
                 problems: list[Problem] | None = None) -> None:
        self.source, self.section, self.table = source, section, dict(table)
        self.problems: list[Problem] = [] if problems is None else problems
        self.known: set[str] = set()  # every key asked for: the "did you mean" candidates

    def _problem(self, key: str, reason: str) -> Problem:
        return Problem(self.source, (*self.section.split("."), key) if self.section else (key,), reason)

    def report(self, key: str, reason: str) -> None:
        self.problems.append(self._problem(key, reason))

    def fail(self, key: str, reason: str) -> ConfigError:
        """For a check that cannot go on: raise it; the problems found so far are kept."""
        return ConfigError([*self.problems, self._problem(key, reason)])

    def get(self, key: str, kind: type[T], default: T, check: Callable[[T], str | None] | None = None) -> T:
        self.known.add(key)
        if key not in self.table:
            return default
        value = self.table.pop(key)
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            self.report(key, f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
            return default
        if check is not None and (problem := check(value)):
            self.report(key, problem)
            return default
        return value  # type: ignore[no-any-return]

    def choice(self, key: str, default: str, allowed: tuple[str, ...]) -> str:
        return self.get(key, str, default, lambda v: None if v in allowed else
                        f"must be one of {', '.join(allowed)}; got {v!r}{did_you_mean(v, allowed)}")

    def names(self, key: str, allowed: tuple[str, ...], default: tuple[str, ...] = ()) -> tuple[str, ...]:
        raw = self.get(key, list, list(default))
        out: list[str] = []
        for item in raw:
            if not isinstance(item, str):
                self.report(key, f"entries must be strings; got {item!r}")
            elif planned := NOT_IMPLEMENTED.get((self.section, key, item)):
                self.report(key, f"{item!r}: {planned}")
            elif item not in allowed:
                known = ", ".join(allowed) or "none"
                self.report(key, f"unknown value {item!r}{did_you_mean(item, allowed)}; known: {known}")
            elif item in out:
                self.report(key, f"{item!r} listed twice")
            else:
                out.append(item)
        return tuple(out)

    def options(self, key: str, allowed: tuple[str, ...], integers: tuple[str, ...] = ()
                ) -> tuple[frozenset[str], dict[str, int]]:
        """A list of option names, or the kubelet's table of name = "value" (see policy_options)."""
        self.known.add(key)
        raw = self.table.get(key, [])
        if not isinstance(raw, Mapping):
            names = self.names(key, allowed + integers)
            for need in (n for n in names if n in integers):
                self.report(key, f'{need!r} takes a value: write {key} = {{ {need} = "N" }}')
            return frozenset(n for n in names if n not in integers), {}
        self.table.pop(key)
        try:
            return parse_option_table(raw, allowed, integers)
        except ValueError as exc:
            self.report(key, str(exc))
            return frozenset(), {}

    def done(self) -> None:
        for key in sorted(self.table):
            self.report(key, "unknown key" + did_you_mean(key, self.known))


def _non_negative(v: float) -> str | None:
    return "must not be negative" if v < 0 else None


def load(text: str, source: str = "<config>") -> Settings:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([syntax_problem(source, text, exc)]) from None
    try:
        return _parse(data, source)
    except ConfigError as exc:  # add each key's line and column
        where = key_positions(text)
        located = [p.at(*(locate(where, p.path) or (None, None))) for p in exc.problems]
        raise ConfigError(sorted(located, key=lambda p: (p.line or 0, p.column or 0))) from None


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
    return _Reader(root.source, name, table, root.problems)


def _parse(data: Mapping[str, Any], source: str) -> Settings:
    root = _Reader(source, "", data)
    sysfs_root = root.get("sysfs_root", str, "/")

    r = _section(root, "cpu_manager")
    policy = r.get("policy", str, "static",
                   lambda v: None if v == "static" else f"only 'static' is implemented; got {v!r}")
    reserved_text = r.get("reserved_cpus", str, "")
    try:
        reserved = CPUSet.parse(reserved_text) if reserved_text.strip() else None
    except CPUSetError as exc:
        r.report("reserved_cpus", str(exc))
        reserved = None
    count = r.get("reserved_cpu_count", int, 0, lambda v: _non_negative(v))
    if reserved is not None and count:
        r.report("reserved_cpu_count", "set either reserved_cpus or reserved_cpu_count, not both")
    cpu = CPUManagerSettings(
        policy=policy, reserved_cpus=reserved, reserved_cpu_count=count,
        policy_options=r.options("policy_options", CPU_POLICY_OPTIONS)[0],
        isolated_cpus=r.choice("isolated_cpus", "exclusive-first", ("exclusive-first", "unused")),
        core_kinds=r.choice("core_kinds", "prefer-same", ("mixed", "prefer-same", "strict")),
        kubelet_version=release_of(r.get("kubelet_version", str, DEFAULT_RELEASE, release_problem)),
        post_release_fixes=r.names("post_release_fixes", ()),
        disable_cpu_quota_with_exclusive_cpus=r.get("disable_cpu_quota_with_exclusive_cpus", bool, True),
    )
    r.done()

    r = _section(root, "topology_manager")
    policy = r.choice("policy", "none", TOPOLOGY_POLICIES)
    scope = r.choice("scope", "container", TOPOLOGY_SCOPES)
    topo_options, numbers = r.options("policy_options", TOPOLOGY_OPTIONS, ("max-allowable-numa-nodes",))
    max_numa = numbers.get("max-allowable-numa-nodes")
    if max_numa is not None and max_numa < MIN_MAX_ALLOWABLE_NUMA_NODES:
        raise r.fail("policy_options", f'the minimum value of "max-allowable-numa-nodes" should not be less '
                                       f"than {MIN_MAX_ALLOWABLE_NUMA_NODES}")
    plrm = r.get("pod_level_resource_managers", bool, False)  # both scopes built (README)
    topo = TopologyManagerSettings(policy=policy, scope=scope, policy_options=topo_options,
                                   max_allowable_numa_nodes=max_numa, pod_level_resource_managers=plrm)
    r.done()

    r = _section(root, "hints")
    hints = HintSettings(providers=r.names("providers", HINT_PROVIDERS, ("cpu",)))
    for problem in checks.providers_problems(hints.providers, topo.scope, topo.pod_level_resource_managers):
        r.report("providers", problem)
    r.done()

    r = _section(root, "memory_manager")
    mm = MemoryManagerSettings(
        reserved_memory=r.get("reserved_memory", str, "", reserved_memory_problem),
        mems=r.choice("mems", "aligned", ("aligned", "all")),
    )
    r.done()

    r = _section(root, "podresources")
    pd = PodResourcesSettings()
    podres = PodResourcesSettings(
        socket=r.get("socket", str, pd.socket, lambda v: None if v else "must not be empty"),
        refresh_seconds=r.get("refresh_seconds", float, pd.refresh_seconds, _seconds_problem(0.1, 3600)),
        timeout_seconds=r.get("timeout_seconds", float, pd.timeout_seconds, _seconds_problem(0.05, 60)))
    r.done()

    r = _section(root, "nri")
    d = NRISettings()
    nri = NRISettings(
        socket=r.get("socket", str, d.socket),
        plugin_name=r.get("plugin_name", str, d.plugin_name, plugin_name_problem),
        plugin_index=r.get("plugin_index", str, d.plugin_index, lambda v: None if len(v) == 2 and v.isdigit()
                           else f"must be exactly two digits; got {v!r}"),
        on_reject=r.choice("on_reject", d.on_reject, ("fail", "shared")),
        on_timeout=r.choice("on_timeout", d.on_timeout, ("shared", "fail")),
        budget_margin_ms=r.get("budget_margin_ms", int, d.budget_margin_ms, _seconds_problem(50, 1500)),
        reconnect_max_seconds=r.get("reconnect_max_seconds", float, d.reconnect_max_seconds,
                                    _seconds_problem(0.1, 300)),
    )
    r.done()

    r = _section(root, "reconcile")
    rd = ReconcileSettings()
    rec = ReconcileSettings(
        period_seconds=r.get("period_seconds", float, rd.period_seconds, _non_negative),
        cri_socket=r.get("cri_socket", str, rd.cri_socket),
        cgroup_root=r.get("cgroup_root", str, rd.cgroup_root),
        cgroup_writes=r.get("cgroup_writes", bool, rd.cgroup_writes),
        cgroup_v1_skip_rebuilds=r.get("cgroup_v1_skip_rebuilds", bool, rd.cgroup_v1_skip_rebuilds),
        systemd_bus=r.get("systemd_bus", str, rd.systemd_bus, lambda v: None if v[:1] in "/" else "must be a path"),
        systemd_timeout_seconds=r.get("systemd_timeout_seconds", float, rd.systemd_timeout_seconds,
                                      _seconds_problem(0.01, 10)),
        runtime_record_quiet_seconds=r.get("runtime_record_quiet_seconds", float, rd.runtime_record_quiet_seconds,
                                           off_or_seconds_problem(0.1, 3600)),
        systemd_pool_on_qos_slices=r.get("systemd_pool_on_qos_slices", bool, rd.systemd_pool_on_qos_slices),
    )
    if rec.systemd_pool_on_qos_slices and not (rec.cgroup_writes and rec.systemd_bus):
        r.report("systemd_pool_on_qos_slices", "needs reconcile.cgroup_writes = true and a reconcile.systemd_bus: the "
                 "QoS slices hold the pool only while systemd holds it too (docs/systemd-pool-design.md)")
        rec = replace(rec, systemd_pool_on_qos_slices=False)
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
        address=r.get("address", str, md.address, metrics_address_problem),
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
    if root.problems:
        raise ConfigError(root.problems)
    return Settings(sysfs_root=sysfs_root, cpu_manager=cpu, topology_manager=topo, hints=hints,
                    memory_manager=mm, podresources=podres, nri=nri,
                    reconcile=rec, state=state, inspect=inspect, metrics=metrics, log=log)
