"""`nri-pinner simulate`: the engine behind a JSON front end, for previewing a node shape.

Scenario: {"topology": {...same shape as `topology --json`...}, "config": {...TOML keys...},
"ops": [{"op": "create", "pod": ..., "container": ..., "qos": ..., "cpu_request_milli": ...,
"cpu_limit_milli": ..., "init": false, "restartable": false, "hints": {...}, "nics": [1, "0000:3b:00.0"],
"devices": [...], "memory_bytes": N, "hugepages": {...}}, {"op": "remove", ...}, {"op": "update", "pod": ...,
"container": ..., "cpu_request_milli": ..., "cpu_limit_milli": ...}]}. ``update`` is an in-place resize
(engine only); its QoS defaults to the one the container was created with. ``nics`` (with
``hints.providers = ["cpu", "nics"]``) sets the pod's NICs: NUMA node ids, or PCI addresses read under
--sysfs (else the config's ``sysfs_root``); devices and memory: see simulate_devices_memory.
Output: one JSON object per op (JSON lines).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

from ..config import ConfigError, from_mapping
from ..engine.admission_engine import AdmissionRequest, Engine
from ..engine.cpumanager.state import EngineState
from ..engine.errors import EngineError
from ..engine.nicmanager.hints import NicHintProvider, NicTable
from ..engine.qos import QoS
from ..engine.topology.model import Topology, TopologyError
from ..engine.topology.nic_pci import NicPCIError, normalize_pci_address, numa_node_of_pci
from ..engine.topology.sysfs import SysfsError, discover
from ..engine.topologymanager.hints import parse_static_hints
from .simulate_devices_memory import AlignmentInputError, DeviceIndex, op_devices, op_memory, scenario_memory_policy

CREATE_KEYS = {"op", "pod", "container", "qos", "cpu_request_milli", "cpu_limit_milli", "init", "restartable",
               "hints", "pod_exclusive_cpus", "nics", "devices", "memory_bytes", "hugepages"}
REMOVE_KEYS = {"op", "pod", "container"}
UPDATE_KEYS = {"op", "pod", "container", "qos", "cpu_request_milli", "cpu_limit_milli"}


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
        if "podresources" in settings.hints.providers:
            raise ScenarioError("hints.providers: 'podresources' is not implemented in simulate (it reads a live "
                                "kubelet); give each op its 'devices' or raw 'hints' instead")
        providers = []
        if "nics" in settings.hints.providers:
            providers.append(NicHintProvider(topology.numa_nodes, ScenarioNics(sysfs_root or settings.sysfs_root)))
        memory = scenario_memory_policy(settings, topology, scenario.get("topology"), sysfs_root)
        return Engine.from_settings(settings, topology, providers, memory=memory)
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


class ScenarioNics(NicTable):
    """Pods' NIC NUMA nodes as the ops give them; PCI addresses are read under ``root``."""

    def __init__(self, root: str) -> None:
        super().__init__()
        self.root = root

    def take(self, topology: Topology, pod: str, nics: Any, where: str) -> None:
        if not isinstance(nics, list):
            raise ScenarioError(f"{where}: 'nics' must be a list of NUMA node ids or PCI addresses")
        nodes = []
        for i, nic in enumerate(nics):
            if isinstance(nic, int) and not isinstance(nic, bool):
                if nic not in topology.numa_nodes:
                    raise ScenarioError(f"{where}.nics[{i}]: NUMA node {nic} is not in the topology "
                                        f"(nodes {', '.join(map(str, topology.numa_nodes))})")
                nodes.append(nic)
            elif isinstance(nic, str):
                try:
                    address = normalize_pci_address(nic)
                except NicPCIError as exc:
                    raise ScenarioError(f"{where}.nics[{i}]: {exc}") from exc
                if not os.path.isdir(os.path.join(self.root, "sys", "bus", "pci", "devices", address)):
                    raise ScenarioError(f"{where}.nics[{i}]: no PCI device {address} under {self.root}/sys/bus/pci")
                node = numa_node_of_pci(self.root, address)
                if node is not None:  # -1: no NUMA affinity, no constraint (as in the service)
                    nodes.append(node)
            else:
                raise ScenarioError(f"{where}.nics[{i}]: expected a NUMA node id or a PCI address, got {nic!r}")
        self.set(pod, nodes)


def _scenario_nics(engine: Engine) -> ScenarioNics | None:
    for provider in engine.extra_providers:
        if isinstance(provider, NicHintProvider) and isinstance(provider.source, ScenarioNics):
            return provider.source
    return None


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
    classes: dict[tuple[str, str], str] = {}  # QoS each container was created with (update's default)
    nics = _scenario_nics(engine)
    for i, op in enumerate(ops):
        where = f"ops[{i}]"
        if not isinstance(op, Mapping):
            raise ScenarioError(f"{where}: must be an object")
        kind = op.get("op")
        if kind == "create":
            request = _request(op, where, index)
            if "nics" in op:
                if nics is None:
                    raise ScenarioError(f"{where}: 'nics' needs \"nics\" in config.hints.providers")
                nics.take(engine.topology, request.pod, op["nics"], where)
            state, decision = engine.admit(state, request)
            if decision.admitted:
                classes.setdefault((request.pod, request.container), str(request.qos))
            yield {"op": "create", **decision.to_json(), **decision.explain()}
        elif kind == "update":
            state, result = _update(engine, state, op, where, classes)
            yield result
        elif kind == "remove":
            unknown = set(op) - REMOVE_KEYS
            if unknown:
                raise ScenarioError(f"{where}: unknown key(s) {sorted(unknown)}")
            pod, container = _str(op, "pod", where), _str(op, "container", where)
            known = state.get(pod, container) is not None
            state = engine.remove(state, pod, container)
            classes.pop((pod, container), None)
            out: dict[str, Any] = {"op": "remove", "pod": pod, "container": container, "removed": known,
                                   "shared": str(engine.policy.shared_pool(state))}
            if not known:
                out["message"] = "no such container"
            yield out
        else:
            raise ScenarioError(f"{where}: op must be 'create', 'update' or 'remove', got {kind!r}")


def _update(engine: Engine, state: EngineState, op: Mapping[str, Any], where: str,
            classes: Mapping[tuple[str, str], str]) -> tuple[EngineState, dict[str, Any]]:
    unknown = set(op) - UPDATE_KEYS
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {sorted(unknown)}")
    pod, container = _str(op, "pod", where), _str(op, "container", where)
    try:
        qos = QoS.parse(str(op.get("qos", classes.get((pod, container), QoS.BEST_EFFORT))))
    except ValueError as exc:
        raise ScenarioError(f"{where}: {exc}") from exc
    state, rd = engine.resize(state, pod, container, qos, _int(op, "cpu_request_milli", where),
                              _int(op, "cpu_limit_milli", where))
    return state, {"op": "update", **rd.to_json()}


def run_scenario_file(path: str, sysfs_root: str | None, out: TextIO) -> int:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()  # noqa: SIM115
        scenario = json.loads(text)
        if not isinstance(scenario, dict):
            raise ScenarioError("scenario must be a JSON object")
        engine = load_engine(scenario, sysfs_root)
        for note in engine.notes:
            print(f"nri-pinner simulate: note: {note}", file=sys.stderr)
        try:
            index = DeviceIndex(scenario.get("topology"), sysfs_root)
        except AlignmentInputError as exc:
            raise ScenarioError(str(exc)) from exc
        for result in run_ops(engine, scenario.get("ops", []), index):
            out.write(json.dumps(result) + "\n")
    except BrokenPipeError:
        raise  # the reader of stdout went away: the CLI ends quietly, this is not a scenario error
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
