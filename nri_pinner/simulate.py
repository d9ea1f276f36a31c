"""`nri-pinner simulate`: the engine behind a JSON front end, for previewing a node shape.

Scenario: {"topology": {...same shape as `topology --json`...}, "config": {...TOML keys...},
"ops": [{"op": "create", "pod": ..., "container": ..., "qos": ..., "cpu_request_milli": ...,
"cpu_limit_milli": ..., "init": false, "restartable": false, "hints": {...}, "devices": [...],
"memory_bytes": N, "hugepages": {...}}, {"op": "remove", ...}]} (devices and memory: see simulate_alignment).
Output: one JSON object per op (JSON lines).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

from .config import ConfigError, from_mapping
from .engine.admission import AdmissionRequest, Engine
from .engine.cpumanager.state import EngineState
from .engine.errors import EngineError
from .engine.qos import QoS
from .engine.topology.model import Topology, TopologyError
from .engine.topology.sysfs import SysfsError, discover
from .engine.topologymanager.hints import parse_static_hints
from .simulate_alignment import AlignmentInputError, DeviceIndex, op_devices, op_memory, scenario_memory_policy

CREATE_KEYS = {"op", "pod", "container", "qos", "cpu_request_milli", "cpu_limit_milli", "init", "restartable",
               "hints", "pod_exclusive_cpus", "devices", "memory_bytes", "hugepages"}
REMOVE_KEYS = {"op", "pod", "container"}


class ScenarioError(ValueError):
    """A scenario that cannot be run; the message names the part that is wrong."""


def load_engine(scenario: Mapping[str, Any], sysfs_root: str | None) -> Engine:
    unknown = set(scenario) - {"topology", "config", "ops"}
    if unknown:
        raise ScenarioError(f"unknown top-level key(s) {sorted(unknown)}; expected topology, config, ops")
    try:
        if "topology" in scenario:
            topology = _topology(scenario["topology"])
        elif sysfs_root is not None:
            topology = discover(sysfs_root)
        else:
            raise ScenarioError("no topology: give scenario.topology or --sysfs ROOT")
        settings = from_mapping(scenario.get("config", {}), "scenario.config")
        memory = scenario_memory_policy(settings, topology, scenario.get("topology"), sysfs_root)
        return Engine.from_settings(settings, topology, memory=memory)
    except (TopologyError, SysfsError, ConfigError, EngineError, AlignmentInputError) as exc:
        raise ScenarioError(str(exc)) from exc


def _topology(data: Any) -> Topology:
    # Topology.from_json trusts the shape; check it here so a typo is a message, not a traceback.
    if not isinstance(data, Mapping):
        raise ScenarioError(f"topology must be an object, got {type(data).__name__}")
    cpus = data.get("cpus")
    if not isinstance(cpus, list) or not all(isinstance(c, Mapping) for c in cpus):
        raise ScenarioError("topology.cpus must be a list of objects like "
                            '{"cpu": 0, "core": 0, "socket": 0, "numa": 0, "l3": 0}')
    try:
        return Topology.from_json(data)
    except TopologyError as exc:
        raise ScenarioError(f"topology: {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"topology.numa_distances must be a matrix of integers: {exc}") from exc


def _request(op: Mapping[str, Any], where: str, index: DeviceIndex | None = None) -> AdmissionRequest:
    unknown = set(op) - CREATE_KEYS
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {sorted(unknown)}")
    try:
        hints = parse_static_hints(op.get("hints", {}))
        return AdmissionRequest(
            pod=_str(op, "pod", where), container=_str(op, "container", where),
            qos=str(op.get("qos", QoS.BEST_EFFORT)),
            cpu_request_milli=_int(op, "cpu_request_milli", where), cpu_limit_milli=_int(op, "cpu_limit_milli", where),
            init=_bool(op, "init", where), restartable=_bool(op, "restartable", where),
            hints=hints, pod_exclusive_cpus=_optional_int(op, "pod_exclusive_cpus", where),
            devices=op_devices(index or DeviceIndex(None, None), op["devices"], where) if "devices" in op else {},
            memory=op_memory(op, where),
        )
    except ScenarioError:
        raise
    except ValueError as exc:
        raise ScenarioError(f"{where}: {exc}") from exc


def _str(op: Mapping[str, Any], key: str, where: str) -> str:
    value = op.get(key)
    if not isinstance(value, str) or not value:
        raise ScenarioError(f"{where}: {key!r} must be a non-empty string")
    return value


def _int(op: Mapping[str, Any], key: str, where: str) -> int:
    value = op.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ScenarioError(f"{where}: {key!r} must be a non-negative integer")
    return value


def _optional_int(op: Mapping[str, Any], key: str, where: str) -> int | None:
    return None if op.get(key) is None else _int(op, key, where)


def _bool(op: Mapping[str, Any], key: str, where: str) -> bool:
    value = op.get(key, False)
    if not isinstance(value, bool):
        raise ScenarioError(f"{where}: {key!r} must be true or false, got {value!r}")
    return value


def run_ops(engine: Engine, ops: Any, index: DeviceIndex | None = None) -> Iterator[dict[str, Any]]:
    if not isinstance(ops, list):
        raise ScenarioError("ops must be a list")
    state: EngineState = engine.initial_state()
    for i, op in enumerate(ops):
        where = f"ops[{i}]"
        if not isinstance(op, Mapping):
            raise ScenarioError(f"{where}: must be an object")
        kind = op.get("op")
        if kind == "create":
            state, decision = engine.admit(state, _request(op, where, index))
            yield {"op": "create", **decision.to_json(), **decision.explain()}
        elif kind == "remove":
            unknown = set(op) - REMOVE_KEYS
            if unknown:
                raise ScenarioError(f"{where}: unknown key(s) {sorted(unknown)}")
            pod, container = _str(op, "pod", where), _str(op, "container", where)
            known = state.get(pod, container) is not None
            state = engine.remove(state, pod, container)
            out: dict[str, Any] = {"op": "remove", "pod": pod, "container": container, "removed": known,
                                   "shared": str(engine.policy.shared_pool(state))}
            if not known:
                out["message"] = "no such container"
            yield out
        else:
            raise ScenarioError(f"{where}: op must be 'create' or 'remove', got {kind!r}")


def run_scenario_file(path: str, sysfs_root: str | None, out: TextIO) -> int:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()  # noqa: SIM115
        scenario = json.loads(text)
        if not isinstance(scenario, dict):
            raise ScenarioError("scenario must be a JSON object")
        engine = load_engine(scenario, sysfs_root)
        try:
            index = DeviceIndex(scenario.get("topology"), sysfs_root)
        except AlignmentInputError as exc:
            raise ScenarioError(str(exc)) from exc
        for result in run_ops(engine, scenario.get("ops", []), index):
            out.write(json.dumps(result) + "\n")
    except OSError as exc:
        print(f"nri-pinner simulate: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:
        print(f"nri-pinner simulate: {path} is not UTF-8 text: {exc}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as exc:
        print(f"nri-pinner simulate: {path} is not valid JSON: {exc}", file=sys.stderr)
        return 2
    except ScenarioError as exc:
        print(f"nri-pinner simulate: {path}: {exc}", file=sys.stderr)
        return 2
    return 0
