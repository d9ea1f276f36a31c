"""In-place resize in the engine: the kubelet's resize allocator cases, grow / shrink / class-change
sequences on the kubelet's named topologies, and property tests over random create/update/remove runs."""
# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import kube_topologies as kt
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from resize_cases import CASES, DIST_CASES
from test_admission_properties import check_pools, engines, machines

from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.cpumanager.options import StaticPolicyOptions
from nri_pinner.engine.cpumanager.resize import ResizeError, resize
from nri_pinner.engine.cpumanager.resize_allocator import take_by_topology_for_resize
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.cpumanager.static_policy import StaticPolicy
from nri_pinner.engine.cpuset import EMPTY, CPUSet
from nri_pinner.engine.errors import InsufficientCPUs
from nri_pinner.engine.topology.model import Topology

S = CPUSet.parse


# -- 1. the kubelet's resize allocator cases --------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_kubelet_resize_allocator_cases(case: tuple[str, Callable[[], Topology], dict[str, bool], str, str,
                                                      str, int, str | None]) -> None:
    _, topo, opts, available, allocated, baseline, n, expected = case
    avail, held, base = S(available), S(allocated), S(baseline)
    # scale-up keeps what the container holds; scale-down keeps its baseline and re-picks the rest
    retained, pool = (held, avail - held) if n >= len(held) else (base, held - base)
    if expected is None:
        with pytest.raises(InsufficientCPUs, match=f"requested={n}"):
            take_by_topology_for_resize(topo(), pool, retained, n, **opts)
        return
    got = take_by_topology_for_resize(topo(), pool, retained, n, **opts)
    assert got == S(expected)
    assert retained.issubset(got)


@pytest.mark.parametrize("case", DIST_CASES, ids=[c[0] for c in DIST_CASES])
def test_kubelet_distributed_resize_cases(case: tuple[str, Callable[[], Topology], str, str, int, int,
                                                       str | None]) -> None:
    _, topo, available, keep, n, group, expected = case
    pool, retained = S(available) - S(keep), S(keep)
    if expected is None:
        with pytest.raises(InsufficientCPUs):
            take_by_topology_for_resize(topo(), pool, retained, n, distribute_cpus_across_numa=True,
                                        cpu_group_size=group)
        return
    got = take_by_topology_for_resize(topo(), pool, retained, n, distribute_cpus_across_numa=True,
                                      cpu_group_size=group)
    assert got == S(expected)


def test_allocator_refuses_keeping_more_than_requested_and_foreign_cpus() -> None:
    with pytest.raises(ValueError, match="cannot keep 2 CPUs"):
        take_by_topology_for_resize(kt.single_socket_ht(), S("1-3"), S("0,4"), 1)
    with pytest.raises(ValueError, match="not online"):
        take_by_topology_for_resize(kt.single_socket_ht(), S("1-3,9"), S("0"), 2)


# -- 2. sequences on named topologies ------------------------------------------------------------


def engine(topo: Topology, *, reserved: str = "0", options: tuple[str, ...] = (), tm: str = "none",
           scope: str = "container") -> Engine:
    config = {"cpu_manager": {"reserved_cpus": reserved, "policy_options": list(options)},
              "topology_manager": {"policy": tm, "scope": scope}}
    return Engine.from_settings(from_mapping(config), topo)


def admit(e: Engine, s: EngineState, container: str, milli: int, pod: str = "p") -> EngineState:
    s, d = e.admit(s, AdmissionRequest(pod, container, "guaranteed", milli, milli))
    assert d.admitted, d.message
    return s


def test_grow_and_shrink_sequence_dual_socket_ht() -> None:
    e = engine(kt.dual_socket_ht())  # cores {n, n+6}; NUMA 0 even CPUs, NUMA 1 odd
    s = admit(e, e.initial_state(), "c", 2000)
    base = s.assignments[("p", "c")].current
    assert base == S("2,8")
    s, d = e.resize(s, "p", "c", "guaranteed", 4000, 4000)
    assert d.applied and d.kind == "grow" and d.kept == base and d.cpus == S("2,4,8,10")
    assert d.added == S("4,10") and not d.released and d.shared == S("0,1,3,5-7,9,11")
    s, d = e.resize(s, "p", "c", "guaranteed", 6000, 6000)
    assert d.cpus == S("1,2,4,7,8,10") and d.kept == S("2,4,8,10")  # NUMA 0 is full: next core, fewest free
    s, d = e.resize(s, "p", "c", "guaranteed", 4000, 4000)
    assert d.kind == "shrink" and base.issubset(d.cpus) and d.cpus == S("2,4,8,10")
    assert d.released == S("1,7") and s.default_set == S("0,1,3,5-7,9,11")
    s, d = e.resize(s, "p", "c", "guaranteed", 2000, 2000)
    assert d.cpus == base and d.released == S("4,10")
    assert s.assignments[("p", "c")].admitted == base
    s2, d = e.resize(s, "p", "c", "guaranteed", 1000, 1000)
    assert not d.applied and d.reason == "ResizeBelowBaseline" and d.cpus == base and s2 is s
    s2, d = e.resize(s, "p", "c", "guaranteed", 2000, 2000)
    assert d.kind == "unchanged" and s2 is s


def test_grow_never_touches_a_neighbour_and_refuses_when_full() -> None:
    e = engine(kt.single_socket_ht())
    s = admit(e, e.initial_state(), "a", 1000)
    s = admit(e, s, "b", 2000, pod="q")
    b = s.assignments[("q", "b")].current
    s2, d = e.resize(s, "p", "a", "guaranteed", 5000, 5000)
    assert d.applied and d.added.isdisjoint(b) and s2.assignments[("q", "b")].current == b
    s3, d = e.resize(s2, "p", "a", "guaranteed", 6000, 6000)  # only reserved CPU 0 is left
    assert not d.applied and d.reason == "InsufficientCPUs" and s3 is s2


def test_full_pcpus_only_grows_and_shrinks_by_whole_cores() -> None:
    e = engine(kt.dual_socket_ht(), options=("full-pcpus-only",), reserved="0,6")
    s = admit(e, e.initial_state(), "c", 2000)
    s, d = e.resize(s, "p", "c", "guaranteed", 3000, 3000)
    assert not d.applied and d.reason == "SMTAlignmentError"
    # take CPU 10's sibling away: core {4,10} is no longer whole, so it is not a candidate
    s = admit(e, s, "x", 2000, pod="other")
    held = s.assignments[("p", "c")].current
    s, d = e.resize(s, "p", "c", "guaranteed", 4000, 4000)
    assert d.applied and held.issubset(d.cpus)
    topo = e.topology
    for cpu in d.cpus:
        assert topo.siblings(cpu).issubset(d.cpus)
    s, d = e.resize(s, "p", "c", "guaranteed", 2000, 2000)
    assert d.cpus == held and len(d.released) == 2 and topo.siblings(d.released.min()) == d.released


def test_restricted_refuses_a_grow_leaving_the_affinity_and_best_effort_spills() -> None:
    topo = kt.dual_socket_ht()
    for tm, applied in (("restricted", False), ("single-numa-node", False), ("best-effort", True)):
        e = engine(topo, tm=tm)
        s = admit(e, e.initial_state(), "c", 4000)
        assert e.topology.numa_of(s.assignments[("p", "c")].current) == [0]
        s2, d = e.resize(s, "p", "c", "guaranteed", 8000, 8000)
        assert d.applied is applied, tm
        if applied:
            assert d.kept == s.assignments[("p", "c")].current and topo.numa_of(d.cpus) == [0, 1]
        else:
            assert d.reason == "TopologyAffinityError" and s2 is s
        _s3, d = e.resize(s, "p", "c", "guaranteed", 5000, 5000)  # fits in NUMA 0 (CPU 0 is reserved)
        assert d.applied and topo.numa_of(d.cpus) == [0]


def test_class_changes_within_guaranteed_and_burstable_stays_shared() -> None:
    e = engine(kt.single_socket_ht())
    s, d0 = e.admit(e.initial_state(), AdmissionRequest("p", "c", "guaranteed", 500, 500))
    assert not d0.exclusive
    s, d = e.resize(s, "p", "c", "guaranteed", 2000, 2000)
    assert d.kind == "to-exclusive" and d.exclusive and len(d.cpus) == 2 and d.cpus.isdisjoint(s.default_set)
    assert s.assignments[("p", "c")].admitted == d.cpus
    cpus = d.cpus
    s, d = e.resize(s, "p", "c", "guaranteed", 1500, 1500)
    assert d.kind == "to-shared" and not d.exclusive and d.released == cpus and s.default_set == S("0-7")
    assert d.cpus == s.default_set and s.assignments[("p", "c")].current == EMPTY
    s, _ = e.admit(s, AdmissionRequest("b", "c", "burstable", 1000, 2000))
    s2, d = e.resize(s, "b", "c", "burstable", 2000, 2000)  # request == limit, but still Burstable
    assert d.kind == "shared" and not d.exclusive and s2 is s
    s = admit(e, s, "x", 1000, pod="g")
    s2, d = e.resize(s, "g", "x", "burstable", 1000, 2000)
    assert not d.applied and d.reason == "QoSClassChange" and s2 is s


def test_unknown_container_and_bad_policy_are_refused() -> None:
    e = engine(kt.single_socket_ht())
    _s, d = e.resize(e.initial_state(), "p", "nope", "guaranteed", 1000, 1000)
    assert not d.applied and d.reason == "UnknownContainer"
    with pytest.raises(ResizeError):
        resize(e.policy, e.initial_state(), "p", "nope", "guaranteed", 1000, 1000)
    with pytest.raises(ValueError, match="unknown topology manager policy"):
        resize(e.policy, e.initial_state(), "p", "c", "guaranteed", 1000, 1000, affinity_policy="bogus")


def test_shrink_keeps_cpus_shared_with_an_init_container_out_of_the_pool() -> None:
    p = StaticPolicy(kt.single_socket_ht(), S("0"))
    s, d = p.allocate(p.initial_state(), "p", "init", 2000, 2000, "guaranteed", init=True)
    init_cpus = d.cpus
    s, d = p.allocate(s, "p", "app", 2000, 2000, "guaranteed")
    assert d.cpus == init_cpus  # the app took over the init container's CPUs
    s, _ = resize(p, s, "p", "app", "guaranteed", 4000, 4000)
    s, r = resize(p, s, "p", "app", "guaranteed", 0, 0)  # fractional: to-shared
    assert init_cpus.issubset(r.released) and s.default_set.isdisjoint(init_cpus)


def test_distributed_grow_keeps_numa_balance() -> None:
    topo = kt.dual_socket_multi_numa_per_socket_ht()
    e = engine(topo, options=("distribute-cpus-across-numa",))
    s = admit(e, e.initial_state(), "c", 4000)
    held = s.assignments[("p", "c")].current
    s, d = e.resize(s, "p", "c", "guaranteed", 16000, 16000)
    assert held.issubset(d.cpus) and len(d.cpus) == 16
    counts = [len(d.cpus & topo.cpus_in_numa([n])) for n in topo.numa_of(d.cpus)]
    assert max(counts) - min(counts) <= 1, counts


def test_grow_on_256_cpus_keeps_everything_and_stays_on_the_numa_node() -> None:
    topo = kt.dual_socket_multi_numa_per_socket_ht_large()
    e = engine(topo)
    s = admit(e, e.initial_state(), "c", 4000)
    held = s.assignments[("p", "c")].current
    node = topo.numa_of(held)
    s, d = e.resize(s, "p", "c", "guaranteed", 30000, 30000)
    assert held.issubset(d.cpus) and topo.numa_of(d.cpus) == node


def test_uncore_option_grows_within_the_held_cache() -> None:
    p = StaticPolicy(kt.uncore_single_socket_no_smt(), S("15"),
                     StaticPolicyOptions(prefer_align_cpus_by_uncorecache=True))
    s, d = p.allocate(p.initial_state(), "p", "c", 2000, 2000, "guaranteed")
    assert d.cpus == S("12,13")
    s3, r = resize(p, s, "p", "c", "guaranteed", 3000, 3000)
    assert r.cpus == S("12-14")  # the held cache's last free CPU (15 is reserved)
    _, r = resize(p, s3, "p", "c", "guaranteed", 5000, 5000)
    assert r.kept == S("12-14") and r.added == S("0,1")  # the next cache, partially, as the kubelet does


# -- 3. properties over random create / update / remove sequences ---------------------------------


@dataclass(frozen=True)
class Op:
    kind: str
    pod: int
    container: str
    milli: int
    burstable: bool
    pick: int  # updates: which admitted container (index into the sorted keys)


ops = st.lists(st.builds(Op, kind=st.sampled_from(["create", "create", "update", "update", "update", "remove"]),
                         pod=st.integers(0, 1), container=st.sampled_from("ab"), pick=st.integers(0, 3),
                         milli=st.sampled_from([0, 500, 1000, 1500, 2000, 3000, 4000, 6000]),
                         burstable=st.sampled_from([False, False, False, True])), min_size=10, max_size=30)


def step(e: Engine, s: EngineState, op: Op, classes: dict[tuple[str, str], bool]) -> EngineState:
    pod, name = f"pod{op.pod}", op.container
    if op.kind == "update" and s.assignments and op.pick < 3:  # mostly existing containers, sometimes not
        pod, name = sorted(s.assignments)[op.pick % len(s.assignments)]
    # the kubelet never changes a pod's QoS class in a resize: updates keep the class of the create
    burstable = classes.setdefault((pod, name), op.burstable) if op.kind == "update" else op.burstable
    qos = "burstable" if burstable else "guaranteed"
    limit = op.milli + (500 if burstable else 0)
    if op.kind == "create":
        new, d0 = e.admit(s, AdmissionRequest(pod, name, qos, op.milli, limit))
        if d0.admitted and s.get(pod, name) is None:
            classes[(pod, name)] = burstable
        return new
    if op.kind == "remove":
        classes.pop((pod, name), None)
        return e.remove(s, pod, name)
    before = s.get(pod, name)
    new, d = e.resize(s, pod, name, qos, op.milli, limit)
    event(d.kind if d.applied else f"refused {d.reason}")
    if not d.applied:
        assert new is s
        return new
    assert before is not None
    after = new.get(pod, name)
    assert after is not None
    others = {k: a for k, a in s.assignments.items() if k != (pod, name)}
    assert {k: a for k, a in new.assignments.items() if k != (pod, name)} == others  # nobody else changes
    if d.kind == "grow":
        assert before.current.issubset(after.current) and d.kept == before.current  # nothing held moves
        assert d.added == after.current - before.current
        assert d.added.issubset(s.default_set | e.policy.free_isolated(s))  # only free CPUs are taken
    if d.kind == "shrink":
        assert (before.admitted & before.current).issubset(after.current)  # the baseline stays
        assert after.current.issubset(before.current) and d.released == before.current - after.current
        assert s.default_set.issubset(new.default_set)  # the pool only grows
    if d.kind in ("grow", "shrink", "unchanged"):
        assert after.admitted == before.admitted
    if burstable:
        assert not after.exclusive  # a Burstable container is never made exclusive
    return new


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_create_update_remove_sequences_keep_invariants(data: st.DataObject) -> None:
    topo = data.draw(machines())
    e = data.draw(engines(topo))
    s = e.initial_state()
    classes: dict[tuple[str, str], bool] = {}
    for op in data.draw(ops):
        s = step(e, s, op, classes)
        check_pools(e, s)
    assert e.policy.start(s) == (s, [])  # a state built by resizes needs no repair


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_grow_shrink_runs_of_exclusive_containers(data: st.DataObject) -> None:
    """Exclusive containers resized up and down many times: the runs that reach shrink after growth."""
    topo = data.draw(machines(max_cores=4))
    e = data.draw(engines(topo))
    s = e.initial_state()
    classes: dict[tuple[str, str], bool] = {}
    for i in range(data.draw(st.integers(1, 3))):
        s = step(e, s, Op("create", i % 2, "ab"[i // 2], data.draw(st.integers(1, 3)) * 1000, False, 0), classes)
    sizes = st.integers(1, 8).map(lambda n: n * 1000)
    for milli, pick in data.draw(st.lists(st.tuples(sizes, st.integers(0, 2)), min_size=5, max_size=20)):
        s = step(e, s, Op("update", 0, "a", milli, False, pick), classes)
        check_pools(e, s)
    assert e.policy.start(s) == (s, [])


def test_pod_scope_grow_stays_inside_the_pods_merged_affinity() -> None:
    topo = kt.dual_socket_ht()
    e = engine(topo, tm="single-numa-node", scope="pod")
    s = e.initial_state()
    for name in ("a", "b"):
        s, admitted = e.admit(s, AdmissionRequest("p", name, "guaranteed", 2000, 2000, pod_exclusive_cpus=4))
        assert admitted.admitted
    node = topo.numa_of(s.assignments[("p", "a")].current | s.assignments[("p", "b")].current)
    assert len(node) == 1
    s2, d = e.resize(s, "p", "a", "guaranteed", 5000, 5000)  # 7 CPUs on a 6-CPU node: never fits
    assert not d.applied and d.reason == "TopologyAffinityError" and s2 is s
    s2, d = e.resize(s, "p", "a", "guaranteed", 3000, 3000)
    assert d.applied and topo.numa_of(d.cpus) == node


def test_shared_to_exclusive_runs_the_topology_manager() -> None:
    e = engine(kt.dual_socket_ht(), tm="single-numa-node")
    s, _ = e.admit(e.initial_state(), AdmissionRequest("p", "c", "guaranteed", 500, 500))
    s2, d = e.resize(s, "p", "c", "guaranteed", 7000, 7000)  # no NUMA node has 7 CPUs
    assert not d.applied and d.reason == "TopologyAffinityError" and s2 is s and not d.exclusive
    s2, d = e.resize(s, "p", "c", "guaranteed", 6000, 6000)
    assert d.applied and d.kind == "to-exclusive" and e.topology.numa_of(d.cpus) == [1] and d.mems == (1,)
