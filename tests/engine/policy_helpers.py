"""Shorthands shared by the static-policy test files."""

from __future__ import annotations

from nri_pinner.engine.cpumanager.options import StaticPolicyOptions
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.cpumanager.static_policy import StaticPolicy, reserved_by_count
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.qos import QoS
from nri_pinner.engine.topology.model import Topology

S = CPUSet.parse
G = QoS.GUARANTEED


def policy(
    topo: Topology,
    n_reserved: int = 0,
    reserved: str | None = None,
    options: StaticPolicyOptions | None = None,
) -> StaticPolicy:
    opts = options or StaticPolicyOptions()
    res = S(reserved) if reserved is not None else reserved_by_count(topo, n_reserved, opts)
    return StaticPolicy(topo, res, opts)


def alloc(
    p: StaticPolicy,
    st: EngineState,
    milli: int,
    container: str = "c",
    pod: str = "fakePod",
    affinity: int | None = None,
) -> tuple[EngineState, CPUSet]:
    """An exclusive allocation that must succeed and leave the shared pool disjoint from it."""
    new, decision = p.allocate(st, pod, container, milli, milli, G, numa_affinity=affinity)
    assert decision.exclusive
    assert decision.cpus.isdisjoint(new.default_set)
    return new, decision.cpus


def pools(st: EngineState) -> dict[str, object]:
    """The state but the reusable CPU sets: what removing a container restores (the kubelet's
    cpusToReuse outlives RemoveContainer)."""
    return {k: v for k, v in st.to_dict().items() if k not in ("reusable", "reuse_pod")}
