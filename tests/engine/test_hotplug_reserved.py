"""CPU hotplug and the reserved set (engine/hotplug.py): an offline reserved CPU narrows the reserved set
to its online rest, and an engine can be built for the online CPUs from what it returns."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import Engine
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.errors import PolicyOptionError
from nri_pinner.engine.hotplug import settings_for_online
from nri_pinner.engine.topology.model import CPUInfo, Topology


def test_an_offline_reserved_cpu_leaves_the_online_rest_reserved() -> None:
    settings = from_mapping({"cpu_manager": {"reserved_cpus": "0-1"}})
    narrowed, offline = settings_for_online(settings, CPUSet.parse("0,2-7"))
    assert offline == CPUSet([1])
    assert narrowed.cpu_manager.reserved_cpus == CPUSet([0])
    assert settings.cpu_manager.reserved_cpus == CPUSet([0, 1])  # the node's settings are not changed
    assert replace(narrowed, cpu_manager=settings.cpu_manager) == settings  # nothing else is


def test_the_engine_for_the_online_cpus_reserves_the_online_rest() -> None:
    topology = Topology(tuple(CPUInfo(cpu, 0, cpu, 0, 0, online=cpu != 1) for cpu in range(8)))
    settings = from_mapping({"cpu_manager": {"reserved_cpus": "0-1"}})
    with pytest.raises(PolicyOptionError, match="not online"):  # the policy refuses an offline reserved CPU
        Engine.from_settings(settings, topology)
    narrowed, _ = settings_for_online(settings, topology.online)
    assert Engine.from_settings(narrowed, topology).policy.reserved == CPUSet([0])


def test_reserved_cpus_all_online_or_none_named_leave_the_settings_as_they_are() -> None:
    for config in ({"cpu_manager": {"reserved_cpus": "0-1"}}, {"cpu_manager": {"reserved_cpu_count": 2}}, {}):
        settings = from_mapping(config)
        same, offline = settings_for_online(settings, CPUSet.parse("0-7"))
        assert same is settings and not offline
