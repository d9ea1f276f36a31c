"""Property tests of the engine facade: pool invariants, and the kubelet's answer from a naive path.

1. Random machines, random configs (every Topology Manager policy and scope) and random
   create/remove sequences through ``Engine.admit``/``remove``: after every step the pools
   are consistent, a rejection changes nothing, removal gives back what creation took,
   and the same inputs give the same outputs.
2. One admission on a random node state: the engine's merged hint, verdict and CPUs equal
   a naive kubelet path — CPU hints from every NUMA mask, the full cross-product merge
   (``naive_merge``), then the same ``StaticPolicy.allocate`` with the naive hint.
"""
# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kube_topologies as kt
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from naive_merge import ProviderHints, naive_cpu_hints, naive_merge
from policy_helpers import pools

from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import AdmissionRequest, Decision, Engine
from nri_pinner.engine.cpumanager.state import Assignment, EngineState
from nri_pinner.engine.cpuset import EMPTY, CPUSet
from nri_pinner.engine.errors import AdmissionError
from nri_pinner.engine.topology.model import Topology
from nri_pinner.engine.topologymanager.hints import TopologyHint

TM_POLICIES = ["none", "best-effort", "restricted", "single-numa-node"]
CPU_OPTIONS = ["full-pcpus-only", "distribute-cpus-across-numa", "align-by-socket", "strict-cpu-reservation"]


@st.composite
def machines(draw: st.DrawFn, max_numa: int = 4, max_cores: int = 3) -> Topology:
    sockets = draw(st.integers(1, 2))
    numa_per_socket = draw(st.integers(1, max_numa // sockets))
    cores, threads = draw(st.integers(1, max_cores)), draw(st.integers(1, 2))
    n = sockets * numa_per_socket * cores * threads
    isolated = draw(st.sets(st.integers(0, n - 1), max_size=n // 4))
    offline = draw(st.sets(st.integers(1, n - 1), max_size=n // 4)) - isolated if n > 1 else set()
    base = kt.regular(sockets, numa_per_socket, cores, threads, cores_per_l3=max(1, cores // 2),
                      isolated=isolated, offline=offline)
    nodes = base.numa_nodes
    far = st.sampled_from([11, 12, 20, 21, 32])
    distances = {a: {b: 10 if a == b else draw(far) for b in nodes} for a in nodes}
    return Topology(cpus=base.cpus, numa_distances=distances)


@st.composite
def engines(draw: st.DrawFn, topo: Topology, scopes: tuple[str, ...] = ("container", "pod")) -> Engine:
    policy = draw(st.sampled_from(TM_POLICIES))
    options = draw(st.lists(st.sampled_from(CPU_OPTIONS), unique=True, max_size=3))
    if policy == "single-numa-node" and "align-by-socket" in options:
        options.remove("align-by-socket")  # refused by the kubelet (tested in test_admission)
    usable = len(topo.online - topo.isolated)
    config = {
        "cpu_manager": {"policy_options": options, "reserved_cpu_count": draw(st.integers(0, min(2, usable - 1))),
                        "isolated_cpus": draw(st.sampled_from(["exclusive-first", "unused"]))},
        "topology_manager": {"policy": policy, "scope": draw(st.sampled_from(scopes)),
                             "policy_options": draw(st.sampled_from([[], ["prefer-closest-numa-nodes"]]))},
    }
    return Engine.from_settings(from_mapping(config), topo)


def static_hints(numa: int) -> st.SearchStrategy[dict[str, tuple[TopologyHint, ...] | None]]:
    """Device-like hints; a mask may name one node the machine lacks (the merge ANDs it away)."""
    mask = st.integers(1, (1 << (numa + 1)) - 1)
    hint = st.builds(TopologyHint, st.one_of(mask, mask, st.none()), st.booleans())
    entry = st.one_of(st.none(), st.lists(hint, max_size=3).map(tuple))
    return st.dictionaries(st.sampled_from(["vendor.com/gpu", "vendor.com/nic"]), entry, max_size=2)


# -- 1. invariants over random sequences -----------------------------------------------------


@dataclass(frozen=True)
class Op:
    create: bool
    pod: int
    container: str
    cpus: int
    burstable: bool
    init: bool
    restartable: bool


ops = st.lists(st.builds(Op, create=st.booleans(), pod=st.integers(0, 3), container=st.sampled_from("abc"),
                         cpus=st.integers(0, 4), burstable=st.booleans(), init=st.booleans(),
                         restartable=st.booleans()), max_size=20)


def check_pools(e: Engine, s: EngineState) -> None:
    topo, policy = e.topology, e.policy
    shared = s.default_set
    exclusive = [a for a in s.assignments.values() if a.exclusive]
    for i, a in enumerate(exclusive):
        assert a.current and a.current.issubset(topo.online)
        assert a.current.isdisjoint(shared) and a.current.isdisjoint(policy.reserved)
        if e.policy.options.prefer_isolated_cpus is False:
            assert a.current.isdisjoint(topo.isolated)
        for b in exclusive[i + 1:]:
            if a.current & b.current:  # only an app container reusing its pod's init CPUs
                assert a.pod == b.pod and ((a.init and not a.restartable) or (b.init and not b.restartable))
    assert shared.isdisjoint(topo.isolated)
    owned = s.exclusive_cpus()
    strict = policy.reserved if policy.options.strict_cpu_reservation else EMPTY
    pools = [shared, owned, topo.isolated - owned, strict]
    assert sum(len(p) for p in pools) == len(topo.online)  # pairwise disjoint ...
    assert CPUSet.from_mask(shared.mask | owned.mask | topo.isolated.mask | strict.mask) == topo.online  # ... covering


def check_hint_respected(e: Engine, before: EngineState, d: Decision) -> None:
    """Container scope, a preferred hint under restricted/single-numa-node: the CPUs stay inside it."""
    if (e.scope != "container" or not d.exclusive or d.hint is None or not d.hint.preferred
            or e.manager.policy.value not in ("restricted", "single-numa-node")
            or e.policy.options.full_pcpus_only or before.get(d.pod, d.container) is not None):
        return
    nodes = e.topology.numa_nodes if d.hint.affinity is None else [
        n for n in e.topology.numa_nodes if d.hint.affinity >> n & 1]
    inside = e.topology.cpus_in_numa(nodes)
    if e.policy.options.align_by_socket:
        sockets = {e.topology.by_cpu[c].socket for c in inside}
        inside = CPUSet(c.cpu for c in e.topology.cpus if c.socket in sockets)
    assert d.cpus.issubset(inside), f"{d.cpus} outside hint {d.hint}"


def run(e: Engine, seq: list[Op], hints: list[dict[str, Any]]) -> tuple[EngineState, list[dict[str, Any]]]:
    s = e.initial_state()
    log: list[dict[str, Any]] = []
    for op, extra in zip(seq, hints, strict=False):
        pod, name = f"pod{op.pod}", f"{op.container}{int(op.init)}"
        before = s
        if op.create:
            milli = op.cpus * 1000
            req = AdmissionRequest(pod, name, "burstable" if op.burstable else "guaranteed", milli,
                                   milli + (500 if op.burstable else 0), init=op.init,
                                   restartable=op.restartable, hints=extra)
            s, d = e.admit(s, req)
            log.append(d.to_json())
            event(d.reason or ("exclusive" if d.exclusive else "shared"))
            if not d.admitted:
                assert s is before and d.reason in ("TopologyAffinityError", "SMTAlignmentError",
                                                    "InsufficientCPUs")
                continue
            check_hint_respected(e, before, d)
            fresh = not before.pod_assignments(pod)
            if fresh:  # a fresh pod's first container: removing it restores the pools
                assert pools(e.remove(s, pod, name)) == pools(before)
        else:
            gone = before.get(pod, name)
            s = e.remove(s, pod, name)
            if gone is not None and gone.exclusive:
                still = EMPTY
                for a in s.pod_assignments(pod):
                    still = still | a.current
                back = (gone.current - still) & (e.topology.online - e.topology.isolated)
                if e.policy.options.strict_cpu_reservation:
                    back = back - e.policy.reserved
                assert s.default_set == before.default_set | back
            log.append({"removed": str(s.default_set)})
        check_pools(e, s)
    return s, log


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_sequences_keep_pools_consistent(data: st.DataObject) -> None:
    topo = data.draw(machines())
    e = data.draw(engines(topo))
    seq = data.draw(ops)
    hints = data.draw(st.lists(static_hints(len(topo.numa_nodes)), min_size=len(seq), max_size=len(seq)))
    final, log = run(e, seq, hints)
    again, log2 = run(e, seq, hints)
    assert log == log2 and again.to_dict() == final.to_dict()  # deterministic
    assert e.policy.start(final) == (final, [])  # a state the engine built needs no repair


# -- 2. the engine equals a naive kubelet path -------------------------------------------------


def naive_static(hints: dict[str, tuple[TopologyHint, ...] | None]) -> ProviderHints:
    if not hints:
        return None
    return {k: None if v is None else [(h.affinity, h.preferred) for h in v] for k, v in hints.items()}


@st.composite
def node_states(draw: st.DrawFn, e: Engine, with_init: bool) -> tuple[EngineState, CPUSet, CPUSet]:
    """A consistent state: another pod holds random CPUs; pod "p" may have an init container.

    Returns the state, the CPUs free for exclusive use (the kubelet's available set,
    computed here from scratch) and pod p's reusable init CPUs.
    """
    topo, policy = e.topology, e.policy
    managed = e.initial_state().default_set
    candidates = (managed - policy.reserved).sorted()
    init = CPUSet(draw(st.sets(st.sampled_from(candidates), max_size=3))) if with_init and candidates else EMPTY
    rest = (managed - init - policy.reserved).sorted()
    hog = CPUSet(draw(st.sets(st.sampled_from(rest)))) if rest else EMPTY
    iso = topo.isolated.sorted()
    hog_isolated = CPUSet(draw(st.sets(st.sampled_from(iso)))) if iso and policy.options.prefer_isolated_cpus \
        else EMPTY
    assignments: dict[tuple[str, str], Assignment] = {}
    if hog | hog_isolated:
        held = hog | hog_isolated
        assignments[("x", "hog")] = Assignment("x", "hog", held, held, exclusive=True)
    reusable: dict[str, CPUSet] = {}
    if init:
        assignments[("p", "init")] = Assignment("p", "init", init, init, exclusive=True, init=True)
        reusable["p"] = init
    state = EngineState(default_set=managed - init - hog, assignments=assignments, reusable=reusable)
    available = state.default_set - policy.reserved
    if policy.options.prefer_isolated_cpus:
        available = available | (topo.isolated - hog_isolated)
    return state, available, init


def check_against_naive(data: st.DataObject, topo: Topology, e: Engine) -> None:
    with_init = e.scope == "container" and data.draw(st.booleans())
    state, available, reusable = data.draw(node_states(e, with_init))
    n = data.draw(st.integers(0, len(topo.all_cpus) + 1))
    hints = data.draw(static_hints(len(topo.numa_nodes)))
    pod_total = data.draw(st.one_of(st.none(), st.integers(n, n + 4))) if e.scope == "pod" else None
    req = AdmissionRequest("p", "app", "guaranteed", n * 1000, n * 1000, hints=hints, pod_exclusive_cpus=pod_total)
    new, d = e.admit(state, req)
    event(f"{e.manager.policy.value}: {d.reason or ('exclusive' if d.exclusive else 'shared')}")

    affinity: int | None = None
    if e.manager.policy.value == "none":
        assert d.hint is None
    else:
        # the kubelet generates CPU hints ignoring SMT (full-pcpus-only fails later, in Allocate)
        wanted = n if pod_total is None else pod_total
        cpu: ProviderHints = None if wanted == 0 else {"cpu": naive_cpu_hints(
            topo, available, reusable, wanted, align_by_socket=e.policy.options.align_by_socket)}
        (mask, preferred), admit = naive_merge(
            e.manager.policy.value, topo.numa_nodes, [cpu, naive_static(hints)],
            prefer_closest=e.manager.prefer_closest_numa_nodes, distance=topo.distance)
        assert d.hint is not None and (d.hint.affinity, d.hint.preferred) == (mask, preferred)
        if not admit:
            assert not d.admitted and d.reason == "TopologyAffinityError" and new is state
            return
        affinity = mask
    try:
        expected, alloc = e.policy.allocate(state, "p", "app", n * 1000, n * 1000, "Guaranteed",
                                            numa_affinity=affinity)
    except AdmissionError as exc:
        assert not d.admitted and d.reason == exc.reason and new is state
        return
    if alloc.exclusive and not alloc.shared_pool and not e.policy.reserved:
        # our one deliberate difference: without reserved CPUs the last shared CPU is never taken
        assert not d.admitted and d.reason == "InsufficientCPUs" and new is state
        return
    assert d.admitted and d.cpus == alloc.cpus and d.exclusive == alloc.exclusive
    if pod_total is not None and d.hint is not None:  # pod scope: the pod's admission keeps its hint
        expected = expected.with_pod_hint("p", d.hint)
    assert new.to_dict() == expected.to_dict()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_engine_equals_naive_kubelet_path(data: st.DataObject) -> None:
    topo = data.draw(machines(max_numa=8, max_cores=2))
    e = data.draw(engines(topo))
    check_against_naive(data, topo, e)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_engine_equals_naive_on_sixteen_numa_nodes(data: st.DataObject) -> None:
    """2 sockets x 8 NUMA x 1 core: the naive path walks all 65,535 masks and the whole product."""
    topo = kt.regular(2, 8, 1, 1)
    e = data.draw(engines(topo, scopes=("container",)))
    assume(e.manager.policy.value != "none")
    check_against_naive(data, topo, e)

