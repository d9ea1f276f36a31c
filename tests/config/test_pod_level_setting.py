"""topology_manager.pod_level_resource_managers: the kubelet 1.36 alpha gate PodLevelResourceManagers.
Off by default, as the kubelet. "on" is built for container scope (core/own_requests.py,
tests/service/test_pod_level_container_scope.py) and for pod scope (core/pod_scope_blocks.py,
tests/service/test_pod_level_pod_scope.py)."""

from __future__ import annotations

import pytest

from nri_pinner.config import ConfigError, Settings, load
from nri_pinner.config.validate import to_toml


def test_off_by_default_as_the_kubelets_gate() -> None:
    assert load("").topology_manager.pod_level_resource_managers is False
    assert load("[topology_manager]\npod_level_resource_managers = false\n") == Settings()


@pytest.mark.parametrize("scope", ['scope = "container"\n', ""], ids=["container", "default-scope"])
def test_on_is_accepted_in_container_scope(scope: str) -> None:
    tm = load(f"[topology_manager]\n{scope}pod_level_resource_managers = true\n").topology_manager
    assert (tm.pod_level_resource_managers, tm.scope) == (True, "container")


def test_on_is_accepted_in_pod_scope() -> None:
    tm = load('[topology_manager]\nscope = "pod"\npod_level_resource_managers = true\n').topology_manager
    assert (tm.pod_level_resource_managers, tm.scope) == (True, "pod")


def test_a_non_boolean_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected bool, got str 'true'"):
        load('[topology_manager]\npod_level_resource_managers = "true"\n')


@pytest.mark.parametrize("on", ["false", "true"])
def test_the_effective_settings_read_back_the_same(on: str) -> None:
    settings = load(f"[topology_manager]\npod_level_resource_managers = {on}\n")
    assert load(to_toml(settings)) == settings


@pytest.mark.parametrize("scope", ["container", "pod"])
def test_the_memory_provider_with_the_gate_is_refused_in_pod_scope_only(scope: str) -> None:
    """Pod scope's Memory Manager part is not built (engine/pod_level_admission.py: CPUs only): the
    memory provider with it is refused, never accepted to leave such pods without memory."""
    text = (f'[topology_manager]\nscope = "{scope}"\npod_level_resource_managers = true\n'
            '[hints]\nproviders = ["cpu", "memory"]\n')
    if scope == "container":
        assert load(text).hints.providers == ("cpu", "memory")
        return
    with pytest.raises(ConfigError, match=r"not implemented yet: the 'memory' provider with topology_manager\.scope"):
        load(text, source="c.toml")
    assert load(text.replace("pod_level_resource_managers = true", "pod_level_resource_managers = false"))
