"""kubernetes#131850's cases with the default options: the allocator follows kubelet 1.34+ (releases.py).

kubernetes#131850 "cpumanager: uncorecache alignment for odd integer cpus" (fixes #131610), first
released in 1.34 (the 1.34 cycle's review, July 2025; no release note: "NONE"). In
``pkg/kubelet/cm/cpumanager/cpu_assignment.go`` ``takePartialUncore`` its diff rounds the core
count up, ``numCoresNeeded := (a.numCPUsNeeded + a.topo.CPUsPerCore() - 1) / a.topo.CPUsPerCore()``
(the PR's review anchor ``cpu_assignment.go:568``; v1.32.10 ``a.numCPUsNeeded / a.topo.CPUsPerCore()``),
and, when ``a.numCPUsNeeded%2 != 0 && a.topo.CPUsPerCore() > 1``, drops the last of the sorted free
CPUs of those cores when they are more than needed (anchor ``:575``); the cache is claimed only when
exactly the needed CPUs remain. The resize variant of the same function carries the same lines
(``cpuAccumulatorForResize.takePartialUncore``, "follow the same strategy as
cpuAccumulator.takePartialUncore").

Its tests are cases of ``TestStaticPolicyAddWithUncoreAlignment`` in ``policy_static_test.go``:
lines 1694-1857 of master in March 2026 (before the 1.36 release; anchored by PR #137583's hunk
``@@ -1784,7 +1784,7 @@``, which puts ``expCSet: cpuset.New(4, 5, 68, 69)`` at :1787; the same line is
:1774 in #131850's own head, review thread of 2025-07-10). Each case is cited by the line of its
``description``. Not ported: "odd integer cpu required on smt-disabled" (:1697,
topoSmallSingleSocketSingleNumaPerSocketNoSMTUncore, whose definition is in no stored copy; no SMT,
so both rules give its 8-12 anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import kube_topologies as kt
import pytest
from policy_helpers import S, alloc, policy

from nri_pinner.engine.cpumanager.allocator import take_by_topology_uncore
from nri_pinner.engine.cpumanager.options import StaticPolicyOptions
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import CPUInfo, Topology

SMALL, MONO = kt.single_socket_smt_small_uncore, kt.dual_socket_sub_numa_ht_monolithic_uncore


class Case(NamedTuple):
    line: int  # policy_static_test.go line of the case's description (see the module docstring)
    desc: str
    topo: Callable[[], Topology]
    reserved: str
    milli: int
    want: str
    default: str | None = None  # the kubelet's stDefaultCPUSet when it is not the topology's CPUs


CASES_131850 = [
    Case(1721, "odd integer required on smt-enabled", SMALL, "0,1,64,65", 3000, "2,3,66"),
    Case(1744, "odd integer required on odd integer partial uncore", SMALL, "0,1,64", 3000, "2,65,66"),
    Case(1768, "even integer required on odd integer partial uncore", SMALL, "0,1,64", 4000, "4,5,68,69"),
    Case(1791, "large odd integer required on smt-enabled", SMALL, "0,1,64", 11000, "2,65,66,4-7,68-71"),
    # upstream seeds the pool of both MONO cases with SmallUncore's CPUs (0-127)
    Case(1814, "odd integer required on HT monolithic uncore", MONO, "0,1,120", 5000, "2,3,121-123", "0-127"),
    Case(1837, "even integer required on HT monolithic uncore", MONO, "0,1,120", 4000, "2,3,122,123", "0-127"),
]
ODD_MONO = CASES_131850[4]  # the case v1.32 answers otherwise: "2,3,60,122,123"
IDS = [f":{c.line} {c.desc}" for c in CASES_131850]


def admit(case: Case, options: StaticPolicyOptions) -> CPUSet:
    topo = case.topo()
    p = policy(topo, reserved=case.reserved, options=options)
    pool = S(case.default) if case.default is not None else topo.online
    st = EngineState(default_set=pool - p.reserved)  # the kubelet's mock state, reserved CPUs left out
    return alloc(p, st, case.milli, container="with-single-container")[1]


@pytest.mark.parametrize("case", CASES_131850, ids=IDS)
def test_131850_cases_by_default(case: Case) -> None:
    """The default (1.36) gives every answer of #131850's cases; :1814 is the one v1.32 answers
    otherwise (test_allocator_kubelet_134.py)."""
    assert admit(case, StaticPolicyOptions(prefer_align_cpus_by_uncorecache=True)) == S(case.want)


def one_l3_four_numa() -> Topology:
    return Topology(cpus=tuple(CPUInfo(cpu=c, socket=0, core=c // 2, numa=c // 8, l3=0) for c in range(32)))


def test_odd_count_fits_a_partial_cache_by_dropping_the_last_cpu() -> None:
    # 3 of a cache whose first cores with free CPUs are {0,1}, {2,3}: ceil(3/2) = 2 cores, 4 CPUs,
    # the highest (3) dropped. v1.32 took 1 core, 2 CPUs, no fit, and finished core {6,7} instead
    # (test_allocator_kubelet.py keeps that answer).
    topo = one_l3_four_numa()
    assert take_by_topology_uncore(topo, topo.online - S("6,8-15"), 3) == S("0-2")
