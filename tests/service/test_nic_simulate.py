"""`nri-pinner simulate` with ``nics`` per op: NUMA node ids, or PCI addresses read from a fixture sysfs
root (a built tree: this VM has one NUMA node and no SR-IOV NIC)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from nic_fixtures import fixture_sysfs

from nri_pinner.cli.main import main

TOPOLOGY = {"cpus": [{"cpu": c, "core": c, "socket": c // 4, "numa": c // 4, "l3": c // 4} for c in range(8)],
            "numa_distances": [[10, 21], [21, 10]]}
CONFIG = {"cpu_manager": {"reserved_cpus": "0"}, "topology_manager": {"policy": "single-numa-node"},
          "hints": {"providers": ["cpu", "nics"]}}


def op(pod: str, cpus: int = 2, **extra: Any) -> dict[str, Any]:
    return {"op": "create", "pod": pod, "container": "c", "qos": "guaranteed", "cpu_request_milli": cpus * 1000,
            "cpu_limit_milli": cpus * 1000, **extra}


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], ops: list[dict[str, Any]],
        config: dict[str, Any] | None = None, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"topology": TOPOLOGY, "config": CONFIG if config is None else config, "ops": ops}))
    rc = main(["simulate", str(path), *args])
    out, err = capsys.readouterr()
    return rc, [json.loads(line) for line in out.splitlines()], err


def test_numa_ids_and_pci_addresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = fixture_sysfs(tmp_path / "sysfs", {"0000:3b:00.0": 1, "0000:5e:00.0": -1})
    rc, out, err = run(tmp_path, capsys, [
        op("a", nics=[1]), op("b", nics=["3b:00.0"]), op("c", nics=["0000:5e:00.0"]), op("d", cpus=1, nics=[1]),
    ], None, "--sysfs", root)
    assert rc == 0, err
    assert [o["cpus"] for o in out] == ["4-5", "6-7", "1-2", ""]
    assert out[2]["hint"] == {"numa": [0], "preferred": True}  # no NUMA affinity: no constraint
    assert not out[3]["admitted"] and "nics prefers {1}" in out[3]["message"]  # node 1 is full


@pytest.mark.parametrize(("nics", "config", "expected"), [
    ([1], {"topology_manager": {"policy": "single-numa-node"}}, "'nics' needs \"nics\" in config.hints.providers"),
    ([3], None, "ops[0].nics[0]: NUMA node 3 is not in the topology (nodes 0, 1)"),
    (["eth0"], None, "ops[0].nics[0]: not a PCI address: 'eth0'"),
    (["0000:99:00.0"], None, "ops[0].nics[0]: no PCI device 0000:99:00.0 under"),
    ([True], None, "expected a NUMA node id or a PCI address, got True"),
    ("1", None, "'nics' must be a list"),
])
def test_bad_nics_are_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str], nics: Any,
                                      config: dict[str, Any] | None, expected: str) -> None:
    rc, out, err = run(tmp_path, capsys, [op("a", nics=nics)], config, "--sysfs", str(tmp_path))
    assert rc == 2 and out == [] and expected in err
