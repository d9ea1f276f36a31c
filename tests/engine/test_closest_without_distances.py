# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)
"""prefer-closest-numa-nodes on a machine that reports no NUMA distances (issue 21, item 5).

The kubelet refuses to start (it cannot read distances). We warn once (``Engine.notes``:
the service logs it, ``simulate`` prints it) and merge without distances. The property pins
why that loses nothing: with every remote distance equal, "closest" picks what "narrowest"
picks, for every policy and any provider hints.
"""

from __future__ import annotations

import io
import json

import kube_topologies as kt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_admission import engine
from test_merge_properties import providers, to_fast

from nri_pinner.cli.simulate import run_scenario_file
from nri_pinner.engine.admission_engine import NO_DISTANCES_NOTE
from nri_pinner.engine.topologymanager.merge import Policy, TopologyManager, merge

TM = {"policy": "best-effort", "policy_options": ["prefer-closest-numa-nodes"]}


def test_no_distances_is_noted_and_merged_without_distances() -> None:
    topo = kt.dual_socket_ht()
    assert not topo.numa_distances
    e = engine(topo, tm=TM)
    assert e.notes == (NO_DISTANCES_NOTE,)
    assert not e.manager.prefer_closest_numa_nodes


def test_with_distances_there_is_no_note() -> None:
    topo = kt.dual_socket_ht()
    with_d = type(topo)(cpus=topo.cpus, numa_distances={0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}})
    e = engine(with_d, tm=TM)
    assert e.notes == () and e.manager.prefer_closest_numa_nodes


def test_simulate_says_which(tmp_path: object, capsys: object) -> None:
    topo = kt.dual_socket_ht()
    shape = {k: v for k, v in topo.to_json().items() if k != "numa_distances"}
    scenario = {"topology": shape, "config": {"topology_manager": TM},
                "ops": [{"op": "create", "pod": "p", "container": "c", "qos": "guaranteed",
                         "cpu_request_milli": 2000, "cpu_limit_milli": 2000}]}
    path = f"{tmp_path}/s.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(scenario, f)
    out = io.StringIO()
    assert run_scenario_file(path, None, out) == 0
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert "no NUMA distances" in err and "merging without distances" in err
    assert json.loads(out.getvalue().splitlines()[0])["admitted"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_equal_remote_distances_merge_like_no_option(data: st.DataObject) -> None:
    numa = data.draw(st.integers(1, 8))
    remote = data.draw(st.sampled_from([11, 20, 32]))
    hints = [to_fast(a) for a in data.draw(providers(numa, max_providers=4, max_hints=4))]
    nodes = tuple(range(numa))
    for policy in Policy:
        closest = merge(TopologyManager(policy, nodes, True, lambda a, b: 10 if a == b else remote), hints)
        plain = merge(TopologyManager(policy, nodes, False), hints)
        assert (closest.hint, closest.admit) == (plain.hint, plain.admit)


def test_max_allowable_numa_nodes_is_noted_as_unnecessary() -> None:
    e = engine(kt.dual_socket_ht(), tm={"policy": "restricted", "policy_options": {"max-allowable-numa-nodes": "64"}})
    assert any("max-allowable-numa-nodes = 64" in n and "not needed" in n for n in e.notes)
