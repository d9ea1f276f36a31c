"""`nri-pinner simulate` through the real CLI: example scenarios, --sysfs trees, bad input, round trip.

Outputs are checked by meaning, replaying them against the topology: exclusive sets are
disjoint (but for an app container reusing its pod's init CPUs), sized as requested, on
online CPUs, never reserved; the shared pool is always online − isolated − exclusive −
(reserved when strict); mems are the NUMA nodes of the container's CPUs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nri_pinner.cli.main import main
from nri_pinner.cli.simulate import load_engine
from nri_pinner.engine.admission_engine import Engine
from nri_pinner.engine.cpuset import EMPTY, CPUSet

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SCENARIOS = sorted(p for p in (HERE / "scenarios").glob("*.json") if "topology" in json.loads(p.read_text()))
NO_TOPOLOGY = HERE / "scenarios" / "sysfs-any-node.json"
SYSFS = sorted(p for p in (REPO / "tests" / "fixtures" / "sysfs").iterdir() if p.is_dir())
REASONS = {"TopologyAffinityError", "SMTAlignmentError", "InsufficientCPUs"}


def simulate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, Any]], str]:
    rc = main(["simulate", *args])
    out, err = capsys.readouterr()
    return rc, [json.loads(line) for line in out.splitlines()], err


def check_outputs(engine: Engine, ops: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> None:
    topo, policy = engine.topology, engine.policy
    strict = policy.reserved if policy.options.strict_cpu_reservation else EMPTY
    owned: dict[tuple[str, str], tuple[CPUSet, bool]] = {}  # exclusive CPUs and "is an init container"
    live: set[tuple[str, str]] = set()  # every admitted container, shared or exclusive
    assert len(outputs) == len(ops)
    for op, out in zip(ops, outputs, strict=True):
        key = (op["pod"], op["container"])
        assert (out["op"], out["pod"], out["container"]) == (op["op"], *key)
        shared = CPUSet.parse(out["shared"])
        if op["op"] == "create":
            cpus = CPUSet.parse(out["cpus"])
            if not out["admitted"]:
                assert out["reason"] in REASONS and out["message"] and not cpus and out["mems"] == ""
            elif out["exclusive"]:
                milli = op["cpu_request_milli"]
                assert op["qos"] == "guaranteed" and milli == op["cpu_limit_milli"] and len(cpus) == milli // 1000
                assert cpus.issubset(topo.online) and cpus.isdisjoint(policy.reserved)
                assert out["mems"] == ",".join(map(str, topo.numa_of(cpus)))
                if key in owned:
                    assert owned[key][0] == cpus  # re-admission returns the same set
                for (pod, _), (other, other_init) in owned.items():
                    if key not in owned and cpus & other:
                        assert pod == op["pod"] and other_init, f"{key} overlaps {pod}"
                owned[key] = (cpus, bool(op.get("init")) and not op.get("restartable"))
            else:
                assert cpus == shared
            if out["admitted"]:
                live.add(key)
        else:
            assert out["removed"] == (key in live) and ("message" in out) == (key not in live)
            live.discard(key)
            owned.pop(key, None)
        taken = EMPTY
        for cpus, _ in owned.values():
            taken = taken | cpus
        assert shared == topo.online - topo.isolated - strict - taken, f"after {op}"


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_example_scenarios(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    scenario = json.loads(path.read_text())
    rc, outputs, err = simulate(capsys, str(path))
    assert rc == 0 and err == ""
    check_outputs(load_engine(scenario, None), scenario["ops"], outputs)


def test_examples_cover_each_outcome(capsys: pytest.CaptureFixture[str]) -> None:
    seen: set[str] = set()
    for path in SCENARIOS:
        _, outputs, _ = simulate(capsys, str(path))
        for out in outputs:
            seen.add(out.get("reason") or ("exclusive" if out.get("exclusive") else out["op"]))
    assert REASONS | {"exclusive", "create", "remove"} <= seen


@pytest.mark.parametrize("root", SYSFS, ids=lambda p: p.name)
def test_topology_from_sysfs(capsys: pytest.CaptureFixture[str], root: Path) -> None:
    scenario = json.loads(NO_TOPOLOGY.read_text())
    rc, outputs, err = simulate(capsys, str(NO_TOPOLOGY), "--sysfs", str(root))
    assert rc == 0, err
    check_outputs(load_engine(scenario, str(root)), scenario["ops"], outputs)


@pytest.mark.parametrize("root", SYSFS, ids=lambda p: p.name)
def test_topology_json_round_trip(capsys: pytest.CaptureFixture[str], tmp_path: Path, root: Path) -> None:
    assert main(["topology", "--sysfs", str(root), "--json"]) == 0
    topology = json.loads(capsys.readouterr().out)
    scenario = {**json.loads(NO_TOPOLOGY.read_text()), "topology": topology}
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    rc, from_json, _ = simulate(capsys, str(path))
    rc2, from_sysfs, _ = simulate(capsys, str(NO_TOPOLOGY), "--sysfs", str(root))
    assert rc == rc2 == 0 and from_json == from_sysfs


def test_inline_topology_wins_over_sysfs(capsys: pytest.CaptureFixture[str]) -> None:
    path = SCENARIOS[0]
    _, plain, _ = simulate(capsys, str(path))
    _, with_sysfs, _ = simulate(capsys, str(path), "--sysfs", str(SYSFS[0]))
    assert plain == with_sysfs


def test_real_entry_point_reads_stdin() -> None:
    path = HERE / "scenarios" / "init-reuse.json"
    run = subprocess.run([sys.executable, "-m", "nri_pinner.cli", "simulate", "-"], input=path.read_text(),
                         capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    scenario = json.loads(path.read_text())
    check_outputs(load_engine(scenario, None), scenario["ops"], [json.loads(x) for x in run.stdout.splitlines()])


TOPO = {"cpus": [{"cpu": c, "core": c, "socket": 0} for c in range(4)]}
CREATE = {"op": "create", "pod": "p", "container": "c", "qos": "guaranteed",
          "cpu_request_milli": 1000, "cpu_limit_milli": 1000}


def _with_op(i: int, **changes: Any) -> dict[str, Any]:
    op = {k: v for k, v in {**CREATE, **changes}.items() if v is not None}
    return {"topology": TOPO, "ops": [CREATE] * i + [op]}


@pytest.mark.parametrize(("scenario", "words"), [
    ({"ops": []}, "no topology"),
    ({"topology": TOPO, "ops": [], "extra": 1}, "unknown top-level key(s) ['extra']"),
    ({"topology": TOPO, "ops": {"op": "create"}}, "ops must be a list"),
    ({"topology": [1], "ops": []}, "topology must be an object"),
    ({"topology": {"cpus": {"cpu": 0}}, "ops": []}, "topology.cpus must be a list"),
    ({"topology": {"cpus": [{"cpu": 0, "socket": 0}]}, "ops": []}, "lacks 'core'"),
    ({"topology": {**TOPO, "numa_distances": [["x"]]}, "ops": []}, "numa_distances"),
    ({"topology": {**TOPO, "numa_distances": [[10, 20]]}, "ops": []}, "1x1 matrix"),
    ({"topology": TOPO, "config": {"topology_manager": {"policy": "strict"}}, "ops": []},
     "scenario.config: topology_manager.policy"),
    ({"topology": TOPO, "config": {"cpu_manager": {"colour": 1}}, "ops": []}, "cpu_manager.colour: unknown key"),
    ({"topology": TOPO, "config": {"cpu_manager": {"reserved_cpus": "9"}}, "ops": []}, "not online"),
    ({"topology": TOPO, "config": [], "ops": []}, "scenario.config"),
    (_with_op(0, op="resize"), "ops[0]: op must be 'create', 'update' or 'remove'"),
    (_with_op(2, pod=None), "ops[2]: 'pod' must be a non-empty string"),
    (_with_op(1, container=""), "ops[1]: 'container' must be a non-empty string"),
    (_with_op(1, cpu_request_milli="2"), "ops[1]: 'cpu_request_milli' must be a non-negative integer"),
    (_with_op(0, cpu_limit_milli=-1000), "ops[0]: 'cpu_limit_milli'"),
    (_with_op(0, qos="gold"), "ops[0]: unknown QoS 'gold'"),
    (_with_op(0, init="no"), "ops[0]: 'init' must be true or false"),
    (_with_op(0, pod_exclusive_cpus="2"), "ops[0]: 'pod_exclusive_cpus' must be a non-negative integer"),
    (_with_op(0, pod_exclusive_cpus=-1), "ops[0]: 'pod_exclusive_cpus'"),
    (_with_op(0, hints={"gpu": {"numa": [0]}}), "ops[0]: hints for 'gpu' must be a list"),
    (_with_op(0, hints={"gpu": [{"numa": [0], "prefered": True}]}), "ops[0]: hints['gpu'][0] has unknown key"),
    (_with_op(1, cpus=2), "ops[1]: unknown key(s) ['cpus']"),
    ({"topology": TOPO, "ops": [{"op": "remove", "pod": "p", "container": "c", "qos": "x"}]},
     "ops[0]: unknown key(s) ['qos']"),
    ({"topology": TOPO, "ops": ["create"]}, "ops[0]: must be an object"),
    ([1, 2], "scenario must be a JSON object"),
])
def test_bad_scenarios_exit_2_naming_the_problem(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  scenario: Any, words: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(scenario))
    rc, _, err = simulate(capsys, str(path))
    assert rc == 2
    assert words in err and err.startswith("nri-pinner simulate:") and "Traceback" not in err
    assert err.count("ops[") <= 1  # the op index is named once, not repeated by nested handlers


@pytest.mark.parametrize(("content", "words"), [(b"{", "not valid JSON"), (b"\xff\xfe{}", "not UTF-8")])
def test_unreadable_files_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes,
                                 words: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    rc, _, err = simulate(capsys, str(path))
    assert rc == 2 and words in err
    rc, _, err = simulate(capsys, str(tmp_path / "missing.json"))
    assert rc == 2 and "cannot read" in err


def test_bad_sysfs_root_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, _, err = simulate(capsys, str(NO_TOPOLOGY), "--sysfs", str(tmp_path))
    assert rc == 2 and str(tmp_path) in err
