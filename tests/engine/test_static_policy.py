"""Cases from the kubelet's policy_static_test.go, plus our isolated-CPU and repair behaviour."""

from __future__ import annotations

from collections.abc import Callable

import kube_topologies as kt
import pytest
from policy_helpers import G, S, alloc, policy

from nri_pinner.engine.cpumanager.options import StaticPolicyOptions
from nri_pinner.engine.cpumanager.state import Assignment, EngineState
from nri_pinner.engine.cpumanager.static_policy import StaticPolicy, guaranteed_cpus, reserved_by_count
from nri_pinner.engine.cpuset import EMPTY, CPUSet
from nri_pinner.engine.errors import InsufficientCPUs, PolicyOptionError, SMTAlignmentError
from nri_pinner.engine.qos import QoS
from nri_pinner.engine.topology.model import CPUInfo, Topology

FULL = StaticPolicyOptions(full_pcpus_only=True)


def _state(default: str, assigned: dict[str, str] | None = None) -> EngineState:
    assignments = {
        ("fakePod", name): Assignment("fakePod", name, S(c), S(c), exclusive=True)
        for name, c in (assigned or {}).items()
    }
    return EngineState(default_set=S(default), assignments=assignments)


# (description, topology, reserved count, assigned, default, request milli, expected) — for both option sets
OPTIONS_INSENSITIVE = [
    ("one core", kt.single_socket_ht, 1, {"c100": "2,3,6,7"}, "0,1,4,5", 2000, "1,5"),
    ("one socket", kt.dual_socket_ht, 1, {"c100": "2"}, "0,1,3-11", 6000, "1,3,5,7,9,11"),
    ("three cores", kt.dual_socket_ht, 1, {"c100": "1,5"}, "0,2-4,6-11", 6000, "2-4,8-10"),
    ("one socket, no HT", kt.dual_socket_no_ht, 1, {"c100": ""}, "0,1,3-7", 4000, "4-7"),
    ("four cores, no HT", kt.dual_socket_no_ht, 1, {"c100": "4,5"}, "0,1,3,6,7", 4000, "1,3,6,7"),
    ("one socket and one core", kt.dual_socket_ht, 1, {"c100": "2"}, "0,1,3-11", 8000, "1,3-5,7,9-11"),
]

QUAD = kt.quad_socket_four_way_ht
QUAD_S0 = ",".join(str(c) for c in QUAD().socket_cpus[0])
QUAD_S1 = str(QUAD().socket_cpus[1])
QUAD_CASES = [  # assigned is "everything else"
    ("all of socket 0", "0-287", "3,11,4-7", 72000, QUAD_S0),
    ("full cores from three sockets", "0-287", "-", 12000, "1,25,13,38,11,35,23,48,53,173,113,233"),
    ("socket 1 and one full core", "0-287", "+", 76000, f"{QUAD_S1},10,34,22,47"),
]
QUAD_AVAIL = {
    "-": "1,25,13,38,2,9,11,35,23,48,12,51,53,173,113,233,54,61",
    "+": f"{QUAD_S1},10,34,22,47,53,173,61,181,108,228,115,235",
}


@pytest.mark.parametrize("options", [StaticPolicyOptions(), FULL], ids=["default", "full-pcpus-only"])
@pytest.mark.parametrize(
    ("desc", "topo", "nres", "assigned", "default", "milli", "want"),
    OPTIONS_INSENSITIVE,
    ids=[c[0] for c in OPTIONS_INSENSITIVE],
)
def test_add_options_insensitive(
    options: StaticPolicyOptions,
    desc: str,
    topo: Callable[[], Topology],
    nres: int,
    assigned: dict[str, str],
    default: str,
    milli: int,
    want: str,
) -> None:
    p = policy(topo(), nres, options=options)
    _, cpus = alloc(p, _state(default, assigned), milli)
    assert cpus == S(want)


@pytest.mark.parametrize("options", [StaticPolicyOptions(), FULL], ids=["default", "full-pcpus-only"])
@pytest.mark.parametrize(
    ("desc", "_all", "taken", "milli", "want"), QUAD_CASES, ids=[c[0] for c in QUAD_CASES]
)
def test_add_quad_socket(
    options: StaticPolicyOptions, desc: str, _all: str, taken: str, milli: int, want: str
) -> None:
    topo = QUAD()
    free = S(QUAD_AVAIL[taken]) if taken in QUAD_AVAIL else topo.online - S(taken)
    st = _state(str(free), {"c100": str(topo.online - free)})
    _, cpus = alloc(policy(topo, 0, options=options), st, milli)
    assert cpus == S(want)


def test_single_cpu_is_sibling_of_reserved() -> None:
    p = policy(kt.single_socket_ht(), 1)
    assert p.reserved == S("0")
    _, cpus = alloc(p, p.initial_state(), 1000)
    assert cpus == S("4")


def test_only_partial_cores_left_quad() -> None:
    topo = QUAD()
    st = _state("10,11,53,67,52", {"c100": str(topo.online - S("10,11,53,37,55,67,52"))})
    _, cpus = alloc(policy(topo), st, 5000)
    assert cpus == S("10,11,52,53,67")


@pytest.mark.parametrize(
    ("req", "lim", "qos"), [(1000, 2000, QoS.BURSTABLE), (977, 977, G), (1000, 1000, QoS.BEST_EFFORT)]
)
def test_no_exclusive_allocation(req: int, lim: int, qos: QoS) -> None:
    p = policy(kt.single_socket_ht(), 1)
    st, d = p.allocate(p.initial_state(), "pod", "c", req, lim, qos)
    assert not d.exclusive and d.cpus == p.shared_pool(st) == S("0-7")
    assert st.get("pod", "c") == Assignment("pod", "c", EMPTY, EMPTY, exclusive=False)


@pytest.mark.parametrize(
    ("topo", "assigned", "default", "milli", "msg"),
    [
        (kt.single_socket_ht, {}, "0-7", 8000, "requested=8, available=7"),
        (kt.dual_socket_ht, {"c100": "1-3"}, "0,4-11", 10000, "requested=10, available=8"),
        (kt.single_socket_ht, {"c100": "1-6"}, "0,7", 2000, "requested=2, available=1"),
    ],
)
def test_not_enough_cpus_changes_nothing(
    topo: Callable[[], Topology], assigned: dict[str, str], default: str, milli: int, msg: str
) -> None:
    p = policy(topo(), 1)
    st = _state(default, assigned)
    before = st.to_dict()
    with pytest.raises(InsufficientCPUs, match=msg):
        p.allocate(st, "fakePod", "new", milli, milli, G)
    assert st.to_dict() == before


def test_quad_not_enough() -> None:
    topo = QUAD()
    st = _state("10,11,53,37,55,67,52", {"c100": str(topo.online - S("10,11,53,37,55,67,52"))})
    with pytest.raises(InsufficientCPUs, match="requested=76, available=7"):
        policy(topo).allocate(st, "fakePod", "c5", 76000, 76000, G)


def test_same_container_gets_same_cpus() -> None:
    p = policy(kt.single_socket_ht(), 1)
    st = _state("0,1,4,5", {"c3": "2,3,6,7"})
    new, d = p.allocate(st, "fakePod", "c3", 4000, 4000, G)
    assert d.already_assigned and d.cpus == S("2,3,6,7") and new.default_set == S("0,1,4,5")


# --- full-pcpus-only -------------------------------------------------------------------------------
def test_smt_alignment_errors() -> None:
    p = policy(kt.single_socket_ht(), 1, options=FULL)
    with pytest.raises(SMTAlignmentError) as e1:
        p.allocate(p.initial_state(), "pod", "c", 1000, 1000, G)
    assert e1.value == SMTAlignmentError(1, 2) and e1.value.reason == "SMTAlignmentError"
    assert str(e1.value) == "SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2"
    quad = policy(QUAD(), 8, options=FULL)
    with pytest.raises(SMTAlignmentError) as e2:
        quad.allocate(quad.initial_state(), "pod", "c", 15000, 15000, G)
    assert e2.value == SMTAlignmentError(15, 4)


def test_smt_not_enough_physical_cpus() -> None:
    p = policy(kt.dual_socket_ht(), reserved="1,6", options=FULL)
    with pytest.raises(SMTAlignmentError) as err:
        p.allocate(_state("0,2-5,7-11"), "pod", "c", 10000, 10000, G)
    assert err.value == SMTAlignmentError(10, 2, 8, caused_by_physical_cpus=True)
    assert "available physical CPUs = 8, requested CPUs = 10, CPUs per core = 2" in str(err.value)


@pytest.mark.parametrize("reserved", [None, "0,6"])
def test_full_pcpus_takes_all_whole_cores(reserved: str | None) -> None:
    p = policy(kt.dual_socket_ht(), 2, reserved=reserved, options=FULL)
    assert p.reserved == S("0,6")
    _, cpus = alloc(p, _state("1-5,7-11"), 10000)
    assert cpus == S("1-5,7-11")


# --- align-by-socket and NUMA affinity -------------------------------------------------------------
@pytest.mark.parametrize(("by_socket", "want"), [(True, "2,11"), (False, "2,21")])
def test_align_by_socket(by_socket: bool, want: str) -> None:
    p = policy(
        kt.dual_socket_multi_numa_per_socket_ht(), 1, options=StaticPolicyOptions(align_by_socket=by_socket)
    )
    _, cpus = alloc(p, _state("2,11,21,22"), 2000, affinity=0b0101)
    assert cpus == S(want)


@pytest.mark.parametrize(
    ("n", "mask", "want"),
    [
        (2, None, "0,6"),
        (2, 0b01, "0,6"),
        (2, 0b10, "1,7"),
        (8, 0b01, "0,6,2,8,4,10,1,7"),
        (8, 0b10, "1,7,3,9,5,11,0,6"),
    ],
)
def test_topology_aware_allocation(n: int, mask: int | None, want: str) -> None:
    p = policy(kt.dual_socket_ht())
    _, cpus = alloc(p, p.initial_state(), n * 1000, affinity=mask)
    assert cpus == S(want)


# --- init container reuse --------------------------------------------------------------------------
def test_app_container_reuses_init_cpus() -> None:
    p = policy(kt.single_socket_ht())
    st, init_cpus = p.allocate(p.initial_state(), "pod", "init-0", 4000, 4000, G, init=True)[0], None
    assert st.get("pod", "init-0").current == S("0,1,4,5")  # type: ignore[union-attr]
    assert p.reusable(st, "pod") == S("0,1,4,5")
    st, d = p.allocate(st, "pod", "app-0", 2000, 2000, G)
    assert d.cpus == S("0,4") and d.reused == S("0,4") and init_cpus is None
    assert st.default_set == S("2,3,6,7")
    st = p.remove(st, "pod", "init-0")
    assert st.default_set == S("1-3,5-7")


def test_restartable_init_cpus_are_not_reused() -> None:
    p = policy(kt.single_socket_ht())
    st, _ = p.allocate(p.initial_state(), "pod", "sidecar", 4000, 4000, G, init=True, restartable=True)
    st, d = p.allocate(st, "pod", "app-0", 2000, 2000, G)
    assert d.cpus == S("2,6") and st.default_set == S("3,7")


@pytest.mark.parametrize(
    ("assigned", "default", "remove", "want"),
    [
        ({"c1": "1-3"}, "4-7", "c1", "1-7"),
        ({"c1": "1-3", "c2": "4-7"}, "", "c1", "1-3"),
        ({"c1": "1,3,5", "c2": "2,4"}, "6,7", "c1", "1,3,5-7"),
        ({"c1": "1,3,5"}, "2,4,6,7", "c2", "2,4,6,7"),
    ],
)
def test_remove(assigned: dict[str, str], default: str, remove: str, want: str) -> None:
    p = policy(kt.single_socket_ht())
    st = p.remove(_state(default, assigned), "fakePod", remove)
    assert st.default_set == S(want) and st.get("fakePod", remove) is None


# --- reserved, strict reservation, isolated CPUs ---------------------------------------------------
def test_reserved_list_and_strict_reservation() -> None:
    topo = kt.dual_socket_ht()
    assert policy(topo, reserved="0,1").initial_state().default_set == S("0-11")
    strict = policy(topo, reserved="0,1", options=StaticPolicyOptions(strict_cpu_reservation=True))
    assert strict.initial_state().default_set == S("2-11")
    p = policy(kt.single_socket_ht(), reserved="0,1")
    _, cpus = alloc(p, p.initial_state(), 1000)
    assert cpus == S("4")
    _, cpus = alloc(p, _state("0,1,4,5", {"c100": "2,3,6,7"}), 2000, container="c3")
    assert cpus == S("4,5")


@pytest.mark.parametrize(
    ("prefer", "want_first", "want_shared"), [(True, "6,7", "0-5"), (False, "0,4", "0-5")]
)
def test_isolated_cpus(prefer: bool, want_first: str, want_shared: str) -> None:
    topo = kt.regular(1, 1, 4, 2, isolated=[3, 7])  # core 3 = {3, 7} is isolated
    p = StaticPolicy(topo, EMPTY, StaticPolicyOptions(prefer_isolated_cpus=prefer))
    st = p.initial_state()
    assert st.default_set == S("0-2,4-6")  # isolated CPUs are never shared
    st, d = p.allocate(st, "pod", "c", 2000, 2000, G)
    assert d.cpus == (S("3,7") if prefer else S("0,4"))
    assert S("3,7").isdisjoint(st.default_set)


def test_offline_cpus_are_in_no_pool() -> None:
    topo = kt.regular(1, 1, 4, 2, offline=[5])
    p = StaticPolicy(topo, EMPTY)
    assert p.initial_state().default_set == S("0-4,6,7")
    with pytest.raises(PolicyOptionError, match="not online"):
        StaticPolicy(topo, S("5"))


def test_reserved_by_count_takes_lowest_core() -> None:
    assert reserved_by_count(kt.single_socket_ht(), 2) == S("0,4")
    assert reserved_by_count(kt.dual_socket_ht(), 2) == S("0,6")
    with pytest.raises(PolicyOptionError, match="unable to reserve"):
        reserved_by_count(kt.single_socket_ht(), 9)


# --- options ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("opts", "msg"),
    [
        (
            StaticPolicyOptions(full_pcpus_only=True, distribute_cpus_across_cores=True),
            "full-pcpus-only and distrib",
        ),
        (
            StaticPolicyOptions(distribute_cpus_across_numa=True, distribute_cpus_across_cores=True),
            "across-numa and",
        ),
        (
            StaticPolicyOptions(prefer_align_cpus_by_uncorecache=True, distribute_cpus_across_cores=True),
            "uncorecache",
        ),
        (
            StaticPolicyOptions(prefer_align_cpus_by_uncorecache=True, distribute_cpus_across_numa=True),
            "uncorecache",
        ),
    ],
)
def test_refused_option_combinations(opts: StaticPolicyOptions, msg: str) -> None:
    with pytest.raises(PolicyOptionError, match=msg):
        opts.validate(kt.dual_socket_ht())


def test_align_by_socket_refusals() -> None:
    opts = StaticPolicyOptions(align_by_socket=True)
    with pytest.raises(PolicyOptionError, match="single-numa-node"):
        opts.validate(kt.dual_socket_ht(), "single-numa-node")
    with pytest.raises(PolicyOptionError, match="sockets"):
        opts.validate(kt.fake_multi_socket_dual_socket_per_numa_ht())
    opts.validate(kt.dual_socket_multi_numa_per_socket_ht(), "restricted")


def test_options_from_kubelet_mapping() -> None:
    opts = StaticPolicyOptions.from_mapping({"full-pcpus-only": "true", "strict-cpu-reservation": "False"})
    assert opts == StaticPolicyOptions(full_pcpus_only=True)
    with pytest.raises(PolicyOptionError, match="unknown"):
        StaticPolicyOptions.from_mapping({"full-pcpu-only": "true"})
    with pytest.raises(PolicyOptionError, match="bad value"):
        StaticPolicyOptions.from_mapping({"full-pcpus-only": "yes"})


def test_guaranteed_cpus() -> None:
    assert guaranteed_cpus(G, 3000, 3000) == 3
    assert guaranteed_cpus("Guaranteed", 3000, 4000) == 0
    assert guaranteed_cpus(G, 0, 0) == 0
    assert guaranteed_cpus(G, None, None) == 0


# --- start(): repair instead of refusing -----------------------------------------------------------
def test_start_repairs_missing_reserved() -> None:
    p = policy(kt.dual_socket_ht(), 2)
    st, msgs = p.start(_state("0,1"))
    assert 'not all reserved cpus: "0,6" are present in defaultCpuSet: "0-1"' in msgs
    assert st.default_set == S("0-11")


def test_start_initialises_empty_state_silently() -> None:
    p = policy(kt.dual_socket_ht(), 1)
    st, msgs = p.start(EngineState())
    assert st.default_set == S("0-11") and msgs[-1].startswith("shared pool repaired")


def test_start_keeps_consistent_state() -> None:
    p = policy(kt.dual_socket_ht())
    good = _state("1-11", {"0": "0"})
    st, msgs = p.start(good)
    assert msgs == [] and st == good


def test_start_strict_reserved_in_default() -> None:
    p = policy(kt.dual_socket_ht(), 2, options=StaticPolicyOptions(strict_cpu_reservation=True))
    st, msgs = p.start(_state("0,1"))
    assert 'some of strictly reserved cpus: "0" are present in defaultCpuSet: "0-1"' in msgs
    assert st.default_set == S("1-5,7-11")


def test_start_overlap_and_unknown_cpus() -> None:
    p = policy(kt.dual_socket_ht())
    st, msgs = p.start(_state("2-11", {"0": "0-2"}))
    assert 'pod: fakePod, container: 0 cpuset: "0-2" overlaps with default cpuset "2-11"' in msgs
    assert st.default_set == S("3-11") and st.get("fakePod", "0").current == S("0-2")  # type: ignore[union-attr]
    st, msgs = p.start(_state("5-12", {"0": "0-2", "1": "3,4"}))
    assert any("doesn't match with CPUs in state" in m for m in msgs)
    assert st.default_set == S("5-11")
    st, msgs = p.start(_state("3-11", {"a": "0-2", "b": "2"}))
    assert st.get("fakePod", "b") is None and any("dropped" in m for m in msgs)


def test_init_container_admitted_again_does_not_release_cpus_an_app_container_took() -> None:
    # Found by test_random_create_remove_sequences: on one CPU, init a1 → app a0 reuses its CPU → a1
    # admitted again must not make CPU 0 reusable, or app b0 would be given the CPU a0 holds.
    topo = Topology((CPUInfo(cpu=0, socket=0, core=0, numa=0, l3=0),))
    p = StaticPolicy(topo, EMPTY, StaticPolicyOptions())
    s = p.initial_state()
    s, _ = p.allocate(s, "pod0", "a1", 1000, 1000, QoS.GUARANTEED, init=True)
    s, app = p.allocate(s, "pod0", "a0", 1000, 1000, QoS.GUARANTEED)
    assert app.cpus == CPUSet.parse("0") and app.reused == CPUSet.parse("0")
    s, _ = p.allocate(s, "pod0", "a1", 1000, 1000, QoS.GUARANTEED, init=True)
    assert p.reusable(s, "pod0") == EMPTY
    with pytest.raises(InsufficientCPUs):
        p.allocate(s, "pod0", "b0", 1000, 1000, QoS.GUARANTEED)
