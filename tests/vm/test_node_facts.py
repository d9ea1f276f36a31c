"""The VM tier's own proof (guest part 10-node-facts): the guest is the node it claims to be — systemd as
PID 1, cgroup v2 with the cpuset controller, and the configured sockets / cores / SMT threads / NUMA
nodes / distances — and nri-pinner's sysfs discovery, hwloc's lstopo and the kernel agree on it."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from .guest import TOPOLOGIES, GuestRun, Topology

PART = "10-node-facts"

Layout = dict[str, Any]  # {"nodes": {node: cpus}, "sockets": [cpus...], "cores": [cpus...], "distances": [[..]]}


def cpulist(text: str) -> tuple[int, ...]:
    """A kernel cpu list ("0-3,8") as sorted CPUs."""
    out: set[int] = set()
    for item in filter(None, text.strip().split(",")):
        lo, _, hi = item.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return tuple(sorted(out))


def bitmask(text: str) -> tuple[int, ...]:
    """An hwloc cpuset ("0x0000000f", or "0x00000001,0xffffffff" in 32-bit groups) as sorted CPUs."""
    value = int("".join(group.removeprefix("0x") for group in text.split(",")), 16)
    return tuple(cpu for cpu in range(value.bit_length()) if value >> cpu & 1)


def expected(shape: Topology) -> Layout:
    return {
        "nodes": {node: tuple(cpus) for node, cpus in shape.node_cpus().items()},
        "sockets": sorted(tuple(c for c in range(shape.cpus) if shape.socket_of(c) == s) for s in range(shape.sockets)),
        "cores": sorted({tuple(shape.siblings(c)) for c in range(shape.cpus)}),
        "distances": shape.distances(),
    }


def from_kernel(facts: dict[str, Any]) -> Layout:
    sockets: dict[int, list[int]] = {}
    for cpu, package in facts["packages"].items():
        sockets.setdefault(int(package), []).append(int(cpu))
    return {
        "nodes": {int(node): cpulist(cpus) for node, cpus in facts["nodes"].items()},
        "sockets": sorted(tuple(sorted(cpus)) for cpus in sockets.values()),
        "cores": sorted({cpulist(text) for text in facts["siblings"].values()}),
        "distances": [[int(d) for d in facts["distances"][str(node)].split()]
                      for node in sorted(int(n) for n in facts["distances"])],
    }


def from_nri_pinner(topology: dict[str, Any]) -> Layout:
    nodes: dict[int, list[int]] = {}
    sockets: dict[int, list[int]] = {}
    cores: dict[tuple[int, int], list[int]] = {}
    for entry in topology["cpus"]:
        nodes.setdefault(entry["numa"], []).append(entry["cpu"])
        sockets.setdefault(entry["socket"], []).append(entry["cpu"])
        cores.setdefault((entry["socket"], entry["core"]), []).append(entry["cpu"])
    return {
        "nodes": {node: tuple(sorted(cpus)) for node, cpus in sorted(nodes.items())},
        "sockets": sorted(tuple(sorted(cpus)) for cpus in sockets.values()),
        "cores": sorted(tuple(sorted(cpus)) for cpus in cores.values()),
        "distances": topology["numa_distances"],
    }


def from_lstopo(xml: str) -> Layout:
    root = ET.fromstring(xml)
    objects = list(root.iter("object"))

    def of_type(kind: str) -> list[ET.Element]:
        return [o for o in objects if o.get("type") == kind]

    numa = {int(o.get("os_index", "-1")): bitmask(o.get("cpuset", "0x0")) for o in of_type("NUMANode")}
    distances: list[list[int]] = []
    for matrix in root.iter("distances2"):
        if matrix.get("type") != "NUMANode":
            continue
        indexes = [int(i) for i in (matrix.findtext("indexes") or "").split()]
        values = [int(v) for v in " ".join(e.text or "" for e in matrix.iter("u64values")).split()]
        n = len(indexes)
        by_index = {(indexes[i], indexes[j]): values[i * n + j] for i in range(n) for j in range(n)}
        distances = [[by_index[a, b] for b in sorted(indexes)] for a in sorted(indexes)]
    return {
        "nodes": dict(sorted(numa.items())),
        "sockets": sorted(bitmask(o.get("cpuset", "0x0")) for o in of_type("Package")),
        "cores": sorted(bitmask(o.get("cpuset", "0x0")) for o in of_type("Core")),
        "distances": distances,
    }


@pytest.fixture
def facts(node_vm: GuestRun) -> dict[str, Any]:
    part = node_vm.part(PART)
    path = part.dir / "facts.json"
    assert path.is_file(), f"{PART} wrote no facts.json (exit {part.exit}):\n{part.log[-4000:]}"
    data: dict[str, Any] = json.loads(path.read_text())
    assert part.exit == 0 and not data["errors"], "\n".join(data["errors"]) or part.log[-4000:]
    return data


def test_the_guest_is_a_systemd_node_on_cgroup_v2_with_cpuset(facts: dict[str, Any]) -> None:
    assert facts["pid1_comm"] == "systemd"
    assert facts["cgroup_fs"] == "cgroup2fs"
    assert {"cpuset", "cpu", "memory"} <= set(facts["cgroup_controllers"])


def test_the_kernel_sees_the_configured_numa_smt_and_socket_layout(node_vm: GuestRun, facts: dict[str, Any]) -> None:
    shape = TOPOLOGIES[node_vm.topology]
    assert cpulist(facts["online"]) == tuple(range(shape.cpus))
    assert from_kernel(facts) == expected(shape)


def test_nri_pinner_discovery_agrees_with_the_kernel_and_lstopo(node_vm: GuestRun, facts: dict[str, Any]) -> None:
    topology = facts["nri_pinner_topology"]
    assert topology is not None, "nri-pinner topology --json gave nothing"
    assert topology["repairs"] == [], "discovery repaired the guest's sysfs"
    shape = TOPOLOGIES[node_vm.topology]
    want = expected(shape)
    assert from_nri_pinner(topology) == want
    lstopo = from_lstopo(facts["lstopo_xml"])
    if shape.nodes > 1 and not lstopo["distances"]:
        pytest.fail("lstopo reported no NUMA distance matrix")
    assert lstopo == want


def test_the_job_holds_the_cfs_bandwidth_key_on(node_vm: GuestRun) -> None:
    """scripts/vm/guest-job.sh keeps a quota'd unit for the whole boot (container churn then never
    re-patches the kernel's CFS-bandwidth branch; docs/vm-tier.md): its cpu.max is a quota, not "max"."""
    text = node_vm.console.read_text(errors="replace")
    line = next((ln for ln in text.splitlines() if "== vm job: CFS bandwidth key held on (" in ln), None)
    assert line is not None, f"the job did not report the held key; console tail:\n{node_vm.console_tail()}"
    quota, period = line.rsplit("(", 1)[1].rstrip(")").split()
    assert int(quota) == TOPOLOGIES[node_vm.topology].cpus * int(period), line
