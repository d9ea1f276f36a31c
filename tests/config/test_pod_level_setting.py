"""topology_manager.pod_level_resource_managers: the kubelet 1.36 alpha gate PodLevelResourceManagers.
Off by default, as the kubelet. "on" is built for container scope (service/core/own_requests.py,
tests/service/test_pod_level_container_scope.py); in pod scope it is refused as not implemented (the
engine computes the pod-scope allocation, tests/engine/test_pod_level_resource_managers.py, but nothing
applies it), never ignored."""

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


def test_on_in_pod_scope_is_refused_as_not_implemented_at_its_line() -> None:
    text = '[topology_manager]\nscope = "pod"\npod_level_resource_managers = true\n'
    with pytest.raises(ConfigError) as err:
        load(text, "c.toml")
    assert "c.toml:3:1: topology_manager.pod_level_resource_managers: not implemented yet (pod scope)" \
        in str(err.value)


def test_a_non_boolean_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected bool, got str 'true'"):
        load('[topology_manager]\npod_level_resource_managers = "true"\n')


@pytest.mark.parametrize("on", ["false", "true"])
def test_the_effective_settings_read_back_the_same(on: str) -> None:
    settings = load(f"[topology_manager]\npod_level_resource_managers = {on}\n")
    assert load(to_toml(settings)) == settings
