"""``simulate`` with devices, memory and hugepages per op and node capacities in the topology."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from nri_pinner.cli.simulate import run_scenario_file

GB = 1 << 30


def topology() -> dict[str, Any]:
    cpus = [{"cpu": c, "core": c, "socket": c // 4, "numa": c // 4, "l3": c // 4} for c in range(8)]
    return {"cpus": cpus, "numa_distances": [[10, 21], [21, 10]],
            "numa_memory_bytes": {"0": 8 * GB, "1": 8 * GB, "2": 16 * GB},
            "numa_memory_distances": {"2": {"0": 30, "1": 17}},
            "numa_hugepages": {"0": {"hugepages-2Mi": GB}, "1": {"hugepages-2Mi": GB}},
            "devices": [{"pci": "0000:3b:00.0", "char": "195:0", "numa": 0, "driver": "nvidia"},
                        {"pci": "0000:af:00.0", "char": "195:1", "numa": 1, "driver": "nvidia"},
                        {"block": "259:0", "numa": None, "driver": "nvme"}]}


def run(tmp_path: Path, scenario: dict[str, Any]) -> tuple[int, list[dict[str, Any]], str]:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario))
    out = io.StringIO()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = run_scenario_file(str(path), None, out)
    return code, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def config(policy: str = "single-numa-node") -> dict[str, Any]:
    return {"cpu_manager": {"reserved_cpus": "0"}, "topology_manager": {"policy": policy},
            "hints": {"providers": ["cpu", "devices", "memory"]},
            "memory_manager": {"reserved_memory": "0:memory=1Gi"}}


def create(pod: str, cpus: int, **extra: Any) -> dict[str, Any]:
    return {"op": "create", "pod": pod, "container": "c", "qos": "guaranteed",
            "cpu_request_milli": cpus * 1000, "cpu_limit_milli": cpus * 1000, **extra}


def test_gpu_memory_and_hugepages_align_on_the_gpus_node(tmp_path: Path) -> None:
    code, results, err = run(tmp_path, {"topology": topology(), "config": config(), "ops": [
        create("a", 2, devices=[{"char": "195:1"}], memory_bytes=2 * GB, hugepages={"hugepages-2Mi": 512 << 20}),
        create("b", 3, devices=[{"pci": "0000:af:00.0", "resource": "nvidia.com/gpu"}]),
        create("c", 1, devices=[{"block": "259:0"}]),
        {"op": "remove", "pod": "a", "container": "c"},
        create("b", 3, devices=[{"pci": "0000:af:00.0", "resource": "nvidia.com/gpu"}]),
    ]})
    assert code == 0, err
    a, b, c, _, b2 = results
    assert a["admitted"] and a["hint"] == {"numa": [1], "preferred": True} and a["mems"] == "1,2"
    assert a["provider_hints"]["memory"]["hugepages-2Mi"].startswith("{0} {1}")
    assert not b["admitted"] and b["reason"] == "TopologyAffinityError" and b["blamed"][0] == "cpu"
    assert "devices[nvidia.com/gpu]" in b["blamed"]
    assert c["admitted"] and c["provider_hints"]["devices"] == {"nvme": "any"}
    assert b2["admitted"] and b2["hint"]["numa"] == [1]


@pytest.mark.parametrize(("op", "message"), [
    (create("x", 1, devices=[{"char": "1:1"}]), "no device char 1:1"),
    (create("x", 1, devices=[{"char": "195:0", "pci": "x"}]), "one of pci, char, block, vfio"),
    (create("x", 1, memory_bytes=-1), "memory_bytes"),
    (create("x", 1, hugepages={"2Mi": 5}), "hugepages entry"),
])
def test_bad_inputs_are_named(tmp_path: Path, op: dict[str, Any], message: str) -> None:
    code, _, err = run(tmp_path, {"topology": topology(), "config": config(), "ops": [op]})
    assert code == 2 and message in err


def test_memory_provider_needs_node_memory(tmp_path: Path) -> None:
    topo = topology()
    del topo["numa_memory_bytes"]
    code, _, err = run(tmp_path, {"topology": topo, "config": config(), "ops": []})
    assert code == 2 and "memory size unknown" in err
