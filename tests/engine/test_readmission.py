# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)
"""A (pod, container) admitted again, as the kubelet v1.32 handles it (issue 21, item 4).

Rules (policy_static.go GetTopologyHints / GetPodTopologyHints / Allocate): hints are
regenerated from the CPUs the container (pod) holds; a held set of another size gives the
empty CPU hint list, so restricted and single-numa-node refuse (TopologyAffinityError) while
best-effort keeps the old set; the full-pcpus-only checks run before "already present";
a container recorded as shared that comes back Guaranteed gets exclusive CPUs.
"""

from __future__ import annotations

from typing import Any

import kube_topologies as kt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_admission import admit, engine, gpu_on, req

from nri_pinner.engine.cpuset import CPUSet

S = CPUSet.parse
STRICT = ["restricted", "single-numa-node"]


@pytest.mark.parametrize("scope", ["container", "pod"])
@pytest.mark.parametrize("policy", STRICT)
def test_other_size_is_a_topology_affinity_error(policy: str, scope: str) -> None:
    e = engine(kt.dual_socket_ht(), cpu={"reserved_cpus": "0"}, tm={"policy": policy, "scope": scope})
    state, first = admit(e, e.initial_state(), req("p", "c", 2))
    assert first.admitted
    again_state, again = admit(e, state, req("p", "c", 4))
    assert not again.admitted and again.reason == "TopologyAffinityError"
    assert again_state is state


@pytest.mark.parametrize("scope", ["container", "pod"])
def test_other_size_under_best_effort_keeps_the_old_set(scope: str) -> None:
    e = engine(kt.dual_socket_ht(), cpu={"reserved_cpus": "0"}, tm={"policy": "best-effort", "scope": scope})
    state, first = admit(e, e.initial_state(), req("p", "c", 2))
    again_state, again = admit(e, state, req("p", "c", 4))
    assert again.admitted and again.cpus == first.cpus and again_state.to_dict() == state.to_dict()


@pytest.mark.parametrize("scope", ["container", "pod"])
@pytest.mark.parametrize("policy", STRICT)
def test_hints_come_from_the_held_set(policy: str, scope: str) -> None:
    # held on NUMA 0; a device now only on NUMA 1 cannot be aligned with what is held
    e = engine(kt.dual_socket_ht(), cpu={"reserved_cpus": "1"}, tm={"policy": policy, "scope": scope})
    state, first = admit(e, e.initial_state(), req("p", "c", 2, hints=gpu_on(0)))
    assert e.mems_of(first.cpus) == (0,)
    _, same = admit(e, state, req("p", "c", 2, hints=gpu_on(0)))
    assert same.admitted and same.cpus == first.cpus
    _, moved = admit(e, state, req("p", "c", 2, hints=gpu_on(1)))
    assert not moved.admitted and moved.reason == "TopologyAffinityError"


@pytest.mark.parametrize("scope", ["container", "pod"])
def test_shared_then_guaranteed_gets_exclusive_cpus(scope: str) -> None:
    e = engine(kt.dual_socket_ht(), cpu={"reserved_cpus": "0"}, tm={"policy": "restricted", "scope": scope})
    state, shared = admit(e, e.initial_state(), req("p", "c", 2, qos="burstable"))
    assert not shared.exclusive
    state, pinned = admit(e, state, req("p", "c", 2))
    assert pinned.exclusive and len(pinned.cpus) == 2 and pinned.cpus.isdisjoint(pinned.shared)
    assert state.get("p", "c") is not None and state.get("p", "c").exclusive  # type: ignore[union-attr]


def test_smt_check_runs_before_already_present() -> None:
    # 6 cores of 2 threads, core 0 reserved; c holds 4 CPUs, 6 more are taken: 0 whole cores free
    e = engine(kt.dual_socket_ht(), cpu={"reserved_cpus": "0,6", "policy_options": ["full-pcpus-only"]})
    state, c = admit(e, e.initial_state(), req("p", "c", 4))
    state, other = admit(e, state, req("q", "d", 6))
    assert c.admitted and other.admitted
    _, again = admit(e, state, req("p", "c", 4))
    assert not again.admitted and again.reason == "SMTAlignmentError"


# -- the rule on random machines ---------------------------------------------------------------


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    topo = kt.regular(draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 4)),
                      draw(st.integers(1, 2)))
    n_cpus = len(topo.online)
    first = draw(st.integers(1, max(1, n_cpus - 1)))
    second = draw(st.integers(0, n_cpus))
    return {"topo": topo, "first": first, "second": second,
            "policy": draw(st.sampled_from(["best-effort", *STRICT])),
            "scope": draw(st.sampled_from(["container", "pod"]))}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_readmission_rule(case: dict[str, Any]) -> None:
    topo = case["topo"]
    e = engine(topo, cpu={"reserved_cpus": str(min(topo.online))},
               tm={"policy": case["policy"], "scope": case["scope"]})
    state, first = admit(e, e.initial_state(), req("p", "c", case["first"]))
    if not first.admitted:
        return
    again_state, again = admit(e, state, req("p", "c", case["second"]))
    if case["second"] == 0 or case["second"] == case["first"] or case["policy"] == "best-effort":
        # no CPU preference, the same size, or best-effort: it keeps exactly what it holds
        assert again.admitted and again.cpus == first.cpus and again_state.to_dict() == state.to_dict()
    else:
        assert not again.admitted and again.reason == "TopologyAffinityError" and again_state is state
