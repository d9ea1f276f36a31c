"""Property tests: random topologies and random create/remove sequences keep the pools consistent."""
# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)

from __future__ import annotations

from dataclasses import dataclass

import kube_topologies as kt
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_helpers import pools

from nri_pinner.engine.cpumanager.options import StaticPolicyOptions
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.cpumanager.static_policy import StaticPolicy, reserved_by_count
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.errors import AdmissionError
from nri_pinner.engine.qos import QoS
from nri_pinner.engine.topology.model import Topology


@dataclass(frozen=True)
class Op:
    create: bool
    pod: int
    container: str
    cpus: int
    init: bool
    restartable: bool
    numa: int | None


@st.composite
def machines(draw: st.DrawFn) -> Topology:
    sockets = draw(st.integers(1, 2))
    numa = draw(st.integers(1, 2))
    cores = draw(st.integers(1, 4))
    threads = draw(st.integers(1, 2))
    n = sockets * numa * cores * threads
    isolated = draw(st.sets(st.integers(0, n - 1), max_size=n // 4))
    offline = draw(st.sets(st.integers(1, n - 1), max_size=n // 4)) - isolated if n > 1 else set()
    return kt.regular(
        sockets, numa, cores, threads, cores_per_l3=max(1, cores // 2), isolated=isolated, offline=offline
    )


options = st.builds(
    StaticPolicyOptions,
    full_pcpus_only=st.booleans(),
    strict_cpu_reservation=st.booleans(),
    prefer_isolated_cpus=st.booleans(),
    distribute_cpus_across_numa=st.booleans(),
)
ops = st.lists(
    st.builds(
        Op,
        create=st.booleans(),
        pod=st.integers(0, 3),
        container=st.sampled_from("abc"),
        cpus=st.integers(0, 4),
        init=st.booleans(),
        restartable=st.booleans(),
        numa=st.one_of(st.none(), st.integers(1, 3)),
    ),
    max_size=25,
)


def _check(p: StaticPolicy, s: EngineState) -> None:
    topo = p.topology
    shared = p.shared_pool(s)
    exclusive = [a for a in s.assignments.values() if a.exclusive]
    for i, a in enumerate(exclusive):
        assert a.current.isdisjoint(shared)
        assert a.current.isdisjoint(p.reserved)
        assert a.current.issubset(topo.online)
        for b in exclusive[i + 1 :]:
            if a.current & b.current:  # only an app container reusing its pod's init CPUs
                assert a.pod == b.pod and ((a.init and not a.restartable) or (b.init and not b.restartable))
    assert shared.isdisjoint(topo.isolated)
    if not p.options.strict_cpu_reservation:
        assert p.reserved.issubset(shared)
    else:
        assert p.reserved.isdisjoint(shared)
    owned = s.exclusive_cpus()
    unused_isolated = topo.isolated - owned
    strict = p.reserved if p.options.strict_cpu_reservation else CPUSet()
    pools = [shared, owned, unused_isolated, strict]
    assert sum(len(x) for x in pools) == len(topo.online)  # pairwise disjoint ...
    union = CPUSet()
    for x in pools:
        union = union | x
    assert union == topo.online  # ... and covering every online CPU


def _run(p: StaticPolicy, seq: list[Op]) -> EngineState:
    s = p.initial_state()
    for op in seq:
        pod, name = f"pod{op.pod}", f"{op.container}{int(op.init)}"
        if op.create:
            before = s
            try:
                s, d = p.allocate(
                    s,
                    pod,
                    name,
                    op.cpus * 1000,
                    op.cpus * 1000,
                    QoS.GUARANTEED,
                    init=op.init,
                    restartable=op.restartable,
                    numa_affinity=op.numa,
                )
            except AdmissionError:
                assert s is before and s.to_dict() == before.to_dict()
                continue
            if (
                not d.already_assigned
                and not d.reused
                and before.get(pod, name) is None
                and not before.pod_assignments(pod)
            ):
                # a fresh pod's first container: removing it restores the pools; the pod stays the
                # last allocating one (the kubelet's cpusToReuse outlives RemoveContainer)
                after = p.remove(s, pod, name)
                assert pools(after) == pools(before)
                assert after.reuse_pod == (pod if d.exclusive else before.reuse_pod)
        else:
            s = p.remove(s, pod, name)
        _check(p, s)
    return s


@settings(max_examples=200, deadline=None)
@given(topo=machines(), opts=options, n_reserved=st.integers(0, 2), seq=ops)
def test_random_create_remove_sequences(
    topo: Topology, opts: StaticPolicyOptions, n_reserved: int, seq: list[Op]
) -> None:
    candidates = topo.online - topo.isolated
    reserved = (
        reserved_by_count(topo, min(n_reserved, len(candidates) - 1)) if len(candidates) > 1 else CPUSet()
    )
    p = StaticPolicy(topo, reserved, opts)
    final = _run(p, seq)
    assert _run(p, seq).to_dict() == final.to_dict()  # deterministic
    assert EngineState.from_dict(final.to_dict()) == final
    repaired, msgs = p.start(final)
    assert msgs == [] and repaired.to_dict() == final.to_dict()
