# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)
"""The kubelet release the allocator follows (nri_pinner/engine/cpumanager/releases.py,
``cpu_manager.kubelet_version``): kubernetes#131850's takePartialUncore from 1.34 on, v1.32's before.
Sources of the rule and of its cases: test_static_policy_uncore_134.py.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given
from naive_alloc import details_of, naive_packed
from policy_helpers import S, policy
from test_allocator_kubelet import PROPS, requests
from test_static_policy_uncore_134 import CASES_131850, IDS, ODD_MONO, SMALL, Case, admit, one_l3_four_numa

from nri_pinner.cli.simulate import run_scenario_file
from nri_pinner.engine.cpumanager.allocator import take_by_topology_uncore
from nri_pinner.engine.cpumanager.options import StaticPolicyOptions
from nri_pinner.engine.cpumanager.releases import (
    DEFAULT_RELEASE,
    KUBELET_RELEASES,
    PARTIAL_UNCORE_ODD_SMT,
    follows,
    release_of,
)
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.errors import PolicyOptionError
from nri_pinner.engine.topology.model import Topology

SINCE_134 = [r for r in KUBELET_RELEASES if follows(r, PARTIAL_UNCORE_ODD_SMT)]
BEFORE_134 = [r for r in KUBELET_RELEASES if not follows(r, PARTIAL_UNCORE_ODD_SMT)]


@pytest.mark.parametrize("release", SINCE_134)
@pytest.mark.parametrize("case", CASES_131850, ids=IDS)
def test_131850_cases_from_134_on(case: Case, release: str) -> None:
    options = StaticPolicyOptions(prefer_align_cpus_by_uncorecache=True, kubelet_release=release)
    assert admit(case, options) == S(case.want)


@pytest.mark.parametrize("release", BEFORE_134)
def test_kubelet_version_before_134_keeps_v132_placement(release: str) -> None:
    """v1.32.10 takes 5 // 2 = 2 cores of the cache, finds 3 CPUs for 5 and packs instead (issue 21's
    kubelet corpus and the naive_alloc port agree; test_static_policy_uncore.py keeps the case)."""
    options = StaticPolicyOptions(prefer_align_cpus_by_uncorecache=True, kubelet_release=release)
    assert admit(ODD_MONO, options) == S("2,3,60,122,123")


def test_v132_rule_on_the_allocator() -> None:
    topo = one_l3_four_numa()
    assert take_by_topology_uncore(topo, topo.online - S("6,8-15"), 3, odd_smt_uncore=False) == S("0-1,7")


def test_scenario_follows_the_configured_kubelet_version(tmp_path: Path) -> None:
    """Through settings, the engine and simulate: uncore-remainder.json pins kubelet_version 1.32;
    without it the default release answers."""
    source = Path(__file__).parent / "scenarios" / "uncore-remainder.json"
    scenario = json.loads(source.read_text())
    answers = {}
    for version in ("1.32", "v1.33.4", None, "1.34"):
        cm = dict(scenario["config"]["cpu_manager"])
        cm.pop("kubelet_version")
        if version is not None:
            cm["kubelet_version"] = version
        path = tmp_path / "s.json"
        path.write_text(json.dumps({**scenario, "config": {"cpu_manager": cm}}))
        out = io.StringIO()
        assert run_scenario_file(str(path), None, out) == 0
        answers[version] = json.loads(out.getvalue())["cpus"]
    assert answers == {"1.32": "0-1,7", "v1.33.4": "0-1,7", None: "0-2", "1.34": "0-2"}


@PROPS
@given(requests())
def test_uncore_equals_kubelet_134_port(req: tuple[Topology, CPUSet, int]) -> None:
    """The bitmask allocator against naive_alloc's line-by-line takePartialUncore of #131850."""
    topo, avail, n = req
    want = naive_packed(details_of(topo), set(avail), n, uncore=True, odd_smt=True)
    assert take_by_topology_uncore(topo, avail, n) == CPUSet(want)


def test_releases() -> None:
    assert DEFAULT_RELEASE == KUBELET_RELEASES[-1] == "1.36"
    assert BEFORE_134 == ["1.32", "1.33"]
    assert [release_of(v) for v in ("1.34", "v1.34", "1.34.2", " v1.35.0 ")] == ["1.34", "1.34", "1.34", "1.35"]
    for bad in ("1.31", "1.37", "2", "1.x", "latest"):
        with pytest.raises(ValueError):
            release_of(bad)
    with pytest.raises(PolicyOptionError, match=r"known: 1\.32, 1\.33, 1\.34, 1\.35, 1\.36"):
        policy(SMALL(), options=StaticPolicyOptions(kubelet_release="1.31"))
