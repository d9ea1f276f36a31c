"""Topology JSON round trip and the text picture, on discovered sysfs fixtures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import CPUInfo, Topology, TopologyError
from nri_pinner.engine.topology.sysfs import discover
from nri_pinner.engine.topology.view import ISOLATED_MARK, OFFLINE_MARK, UNOWNED, render_topology

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "sysfs"
ALL_FIXTURES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
CELL = re.compile(r"^(\d+)(?:\[[\w-]+\])?(\(iso\)|\(off\))?(?:=(\S+))?$")  # 3[P](iso)=pod/c


def test_fixtures_are_present() -> None:
    assert {"vm-2cpu", "single-socket-ht", "dual-socket-ht", "dual-socket-snc", "amd-multi-l3",
            "offline-isolated"} <= set(ALL_FIXTURES)


# -- JSON ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_json_round_trip(name: str) -> None:
    topo = discover(FIXTURES / name)
    data = json.loads(json.dumps(topo.to_json()))
    back = Topology.from_json(data)
    assert back == topo
    assert back.to_json() == topo.to_json()
    assert back.core_cpus == topo.core_cpus and back.l3_cpus == topo.l3_cpus
    assert back.online == topo.online and back.isolated == topo.isolated


def test_json_keeps_offline_isolated_and_memory() -> None:
    data = discover(FIXTURES / "offline-isolated").to_json()
    offline = {e["cpu"] for e in data["cpus"] if e.get("online") is False}
    isolated = {e["cpu"] for e in data["cpus"] if e.get("isolated")}
    assert (offline, isolated) == ({3, 6, 11}, {2, 10, 14})
    assert data["numa_memory_bytes"] == {"0": 8 << 30, "1": 8 << 30}
    assert data["numa_distances"] == [[10, 11], [11, 10]]


def test_from_json_rejects_a_wrong_distance_matrix() -> None:
    data = discover(FIXTURES / "dual-socket-ht").to_json()
    data["numa_distances"] = [[10]]
    with pytest.raises(TopologyError, match="2x2"):
        Topology.from_json(data)


def test_siblings_across_numa_nodes_are_rejected() -> None:
    with pytest.raises(TopologyError, match="span NUMA"):
        Topology(cpus=(CPUInfo(0, socket=0, core=0, numa=0, l3=0),
                       CPUInfo(1, socket=0, core=0, numa=1, l3=0)))


# -- rendering ------------------------------------------------------------------------
def cells(text: str) -> list[tuple[str, list[str]]]:
    """(core label, thread cells) for every core line."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^\s+(core \d+)\s+(.*)$", line)
        if m:
            out.append((m.group(1), m.group(2).split()))
    return out


def parsed_threads(text: str) -> dict[int, tuple[str | None, str | None]]:
    """CPU -> (mark, owner), asserting each CPU is drawn once."""
    seen: dict[int, tuple[str | None, str | None]] = {}
    for _label, row in cells(text):
        for cell in row:
            m = CELL.match(cell)
            assert m, f"unexpected cell {cell!r}"
            cpu = int(m.group(1))
            assert cpu not in seen, f"CPU {cpu} drawn twice"
            seen[cpu] = (m.group(2), m.group(3))
    return seen


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_render_draws_each_core_once_with_its_threads(name: str) -> None:
    topo = discover(FIXTURES / name)
    text = render_topology(topo)
    rows = cells(text)
    assert len(rows) == len(topo.core_cpus)
    drawn = {frozenset(int(re.split(r"[(=\[]", c)[0]) for c in row) for _l, row in rows}
    assert drawn == {frozenset(s) for s in topo.core_cpus.values()}
    assert set(parsed_threads(text)) == set(topo.all_cpus)
    assert "=" not in "".join(c for _l, row in rows for c in row)  # no owners asked for


def test_render_nests_numa_nodes_under_their_socket() -> None:
    topo = discover(FIXTURES / "dual-socket-snc")
    text = render_topology(topo)
    socket = None
    seen: dict[int, int] = {}
    for line in text.splitlines():
        if m := re.match(r"^socket (\d+)$", line):
            socket = int(m.group(1))
        elif m := re.match(r"^\s+NUMA node (\d+): CPUs (\S+), (\S+) GiB, distance (.*), L3 (\d+)$", line):
            node = int(m.group(1))
            assert socket is not None
            seen[node] = socket
            assert CPUSet.parse(m.group(2)) == topo.numa_cpus[node]
            assert float(m.group(3)) == pytest.approx(topo.numa_memory_bytes[node] / 2**30, abs=0.05)
            assert m.group(4) == " ".join(f"{o}:{topo.distance(node, o)}" for o in topo.numa_nodes)
            assert int(m.group(5)) == topo.by_cpu[topo.numa_cpus[node].min()].l3
    assert seen == {n: topo.by_cpu[topo.numa_cpus[n].min()].socket for n in topo.numa_nodes}
    assert seen == {0: 0, 1: 0, 2: 1, 3: 1}


def test_render_shows_l3_groups_when_a_node_has_several() -> None:
    topo = discover(FIXTURES / "amd-multi-l3")
    text = render_topology(topo)
    groups = {int(m.group(1)): CPUSet.parse(m.group(2))
              for m in re.finditer(r"^\s+L3 (\d+): CPUs (\S+)$", text, re.MULTILINE)}
    assert groups == topo.l3_cpus
    single = render_topology(discover(FIXTURES / "single-socket-ht"))
    assert not re.search(r"^\s+L3 \d+:", single, re.MULTILINE)


def test_render_marks_isolated_offline_and_owners() -> None:
    topo = discover(FIXTURES / "offline-isolated")
    owners = {0: "default/web/app", 8: "default/web/app", 4: "kube-system/dns/coredns"}
    text = render_topology(topo, owners)
    threads = parsed_threads(text)
    marks = {cpu: mark for cpu, (mark, _o) in threads.items() if mark}
    assert marks == {**{c: ISOLATED_MARK for c in topo.isolated},
                     **{c: OFFLINE_MARK for c in topo.all_cpus - topo.online}}
    drawn_owners = {cpu: owner for cpu, (_m, owner) in threads.items()}
    for cpu in topo.all_cpus:
        if cpu not in topo.online:
            assert drawn_owners[cpu] is None
        else:
            assert drawn_owners[cpu] == owners.get(cpu, UNOWNED)
    assert "13 online" in text.splitlines()[0] and "3 isolated (2,10,14)" in text.splitlines()[0]
    legend = text.splitlines()[-1]
    assert "isolated" in legend and "offline" in legend and "shared pool" in legend


def test_render_plain_machine_has_no_legend() -> None:
    text = render_topology(discover(FIXTURES / "vm-2cpu"))
    assert "legend" not in text
    assert text.splitlines()[0].startswith("2 CPUs; 1 socket, 1 NUMA node, 2 cores")
    assert "distance" not in text  # one node: nothing to compare


def test_render_marks_core_kinds() -> None:
    topo = discover(FIXTURES / "hybrid-intel")
    text = render_topology(topo, owners={1: "pod/c"})
    assert "1[P]=pod/c" in text and "4[E]=-" in text
    assert "[K] core kind E: 4-7, P: 0-3" in text
