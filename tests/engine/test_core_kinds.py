"""Core kinds in exclusive allocations, on the hybrid fixtures (4 P + 4 E, 2 big + 4 little)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nri_pinner.config import ConfigError
from nri_pinner.config.settings import load
from nri_pinner.engine.cpumanager.core_kinds import pool_for
from nri_pinner.engine.cpumanager.static_policy import StaticPolicy
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.errors import InsufficientCPUs
from nri_pinner.engine.topology.sysfs import discover

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "sysfs"
INTEL = discover(FIXTURES / "hybrid-intel")  # P: 0-3, E: 4-7
ARM = discover(FIXTURES / "hybrid-arm-capacity")  # big: 0-1, little: 2-5


def test_prefer_same_takes_the_fastest_kind_that_fits() -> None:
    assert pool_for(INTEL, INTEL.online, 3) == CPUSet.parse("0-3")
    assert pool_for(INTEL, CPUSet.parse("2-7"), 3) == CPUSet.parse("4-7")  # only 2 P free
    assert pool_for(ARM, ARM.online, 3) == CPUSet.parse("2-5")


def test_prefer_same_mixes_when_no_kind_fits(caplog: pytest.LogCaptureFixture) -> None:
    assert pool_for(INTEL, INTEL.online, 6) == INTEL.online
    assert "mixes core kinds" in caplog.text


def test_strict_refuses_to_mix_and_mixed_ignores_kinds() -> None:
    with pytest.raises(InsufficientCPUs, match="no single core kind has 5 free CPUs"):
        pool_for(INTEL, INTEL.online, 5, "strict")
    assert pool_for(INTEL, INTEL.online, 2, "mixed") == INTEL.online


def test_uniform_machine_is_untouched() -> None:
    topo = discover(FIXTURES / "dual-socket-ht")
    assert pool_for(topo, topo.online, 4, "strict") == topo.online


def test_static_policy_keeps_an_allocation_on_one_kind() -> None:
    policy = StaticPolicy(INTEL, reserved=CPUSet([0]))
    state, first = policy.allocate(policy.initial_state(), "pod-a", "c", 3000, 3000, "Guaranteed")
    assert first.cpus == CPUSet.parse("1-3")  # P-cores 1-3 (0 reserved)
    _, second = policy.allocate(state, "pod-b", "c", 2000, 2000, "Guaranteed")
    assert second.cpus.issubset(CPUSet.parse("4-7"))
    mixed = StaticPolicy(INTEL, reserved=CPUSet([0]), core_kinds="mixed")
    _, third = mixed.allocate(mixed.initial_state(), "pod-a", "c", 5000, 5000, "Guaranteed")
    assert third.cpus == CPUSet.parse("1-5")


def test_config_key() -> None:
    assert load('[cpu_manager]\ncore_kinds = "strict"\n').cpu_manager.core_kinds == "strict"
    assert load("").cpu_manager.core_kinds == "prefer-same"
    with pytest.raises(ConfigError, match="core_kinds"):
        load('[cpu_manager]\ncore_kinds = "never"\n')


def test_l3_group_stays_the_uncore_unit_on_multi_l3_dies() -> None:
    """dies-clusters: 2 dies per socket, 2 L3 groups (4 CPUs) per die, 4 clusters per die."""
    from nri_pinner.engine.cpumanager.options import StaticPolicyOptions

    topo = discover(FIXTURES / "dies-clusters")
    options = StaticPolicyOptions(prefer_align_cpus_by_uncorecache=True)
    policy = StaticPolicy(topo, reserved=CPUSet([0]), options=options)
    _, got = policy.allocate(policy.initial_state(), "pod", "c", 4000, 4000, "Guaranteed")
    assert len({topo.by_cpu[c].l3 for c in got.cpus}) == 1  # one L3 group, not one die
    assert got.cpus == CPUSet.parse("4-7")  # the first whole L3 group (0-3 holds reserved CPU 0)
