"""`nri-pinner simulate` with `update` ops (in-place resize) through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nri_pinner.cli.main import main
from nri_pinner.engine.cpuset import CPUSet

# 2 sockets x 2 cores x 2 threads; socket = NUMA node; core c holds CPUs c and c+4
TOPO = {"cpus": [{"cpu": c, "core": c % 4, "socket": (c % 4) // 2, "numa": (c % 4) // 2} for c in range(8)]}


def op(kind: str, milli: int | None = None, container: str = "c", **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"op": kind, "pod": "p", "container": container, **extra}
    if milli is not None:
        out.update(cpu_request_milli=milli, cpu_limit_milli=milli)
    return out


def run(capsys: pytest.CaptureFixture[str], tmp_path: Path, ops: list[dict[str, Any]],
        config: dict[str, Any] | None = None) -> tuple[int, list[dict[str, Any]], str]:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"topology": TOPO, "config": config or {"cpu_manager": {"reserved_cpus": "0"}},
                                "ops": ops}))
    rc = main(["simulate", str(path)])
    out, err = capsys.readouterr()
    return rc, [json.loads(line) for line in out.splitlines()], err


def test_update_reports_kept_added_released(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ops = [op("create", 2000, qos="guaranteed"), op("update", 4000), op("update", 2000),
           op("update", 500), op("update", 1000)]
    rc, out, err = run(capsys, tmp_path, ops)
    assert rc == 0 and err == ""
    created = CPUSet.parse(out[0]["cpus"])
    grow, shrink, to_shared, to_excl = out[1:]
    assert grow["kind"] == "grow" and CPUSet.parse(grow["kept"]) == created
    assert len(CPUSet.parse(grow["cpus"])) == 4 and CPUSet.parse(grow["added"]) == CPUSet.parse(grow["cpus"]) - created
    assert shrink["kind"] == "shrink" and CPUSet.parse(shrink["cpus"]) == created
    assert shrink["released"] == grow["added"] and shrink["mems"] == out[0]["mems"]
    assert to_shared["kind"] == "to-shared" and to_shared["released"] == out[0]["cpus"]
    assert to_shared["cpus"] == to_shared["shared"] == "0-7"
    assert to_excl["kind"] == "to-exclusive" and len(CPUSet.parse(to_excl["cpus"])) == 1
    for o in out[1:]:
        assert o["op"] == "update" and o["applied"]
        cpus, pool = CPUSet.parse(o["cpus"]), CPUSet.parse(o["shared"])
        assert cpus.isdisjoint(pool) if o["exclusive"] else cpus == pool


def test_refused_updates_say_why_and_change_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ops = [op("create", 2000, qos="guaranteed"), op("create", 1000, container="b", qos="guaranteed"),
           op("update", 9000), op("update", 1000), op("update", 1000, container="x"),
           op("update", 2000, qos="burstable")]
    rc, out, _ = run(capsys, tmp_path, ops)
    assert rc == 0
    shared = out[1]["shared"]
    for o, reason in zip(out[2:], ["InsufficientCPUs", "ResizeBelowBaseline", "UnknownContainer",
                                   "QoSClassChange"], strict=True):
        assert not o["applied"] and o["reason"] == reason and o["message"] and o["shared"] == shared
    assert out[2]["cpus"] == out[0]["cpus"] and out[2]["added"] == ""


def test_update_under_restricted_stays_on_the_numa_node(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    config = {"cpu_manager": {"reserved_cpus": "0"}, "topology_manager": {"policy": "restricted"}}
    ops = [op("create", 2000, qos="guaranteed"), op("update", 3000)]
    rc, out, _ = run(capsys, tmp_path, ops, config)
    assert rc == 0 and out[0]["mems"] == "0"  # packed onto the node with fewest free (CPU 0 is reserved)
    assert out[1]["applied"] and out[1]["mems"] == "0"
    rc, out, _ = run(capsys, tmp_path, [*ops, op("update", 4000)], config)
    assert not out[2]["applied"] and out[2]["reason"] == "TopologyAffinityError"


@pytest.mark.parametrize(("bad", "words"), [
    (op("update", 1000, cpus=2), "ops[1]: unknown key(s) ['cpus']"),
    (op("update", 1000, qos="gold"), "ops[1]: unknown QoS 'gold'"),
    (op("update", None, cpu_request_milli=-1), "ops[1]: 'cpu_request_milli'"),
])
def test_bad_update_ops_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, bad: dict[str, Any],
                               words: str) -> None:
    rc, _, err = run(capsys, tmp_path, [op("create", 1000, qos="guaranteed"), bad])
    assert rc == 2 and words in err
