"""topology_manager.pod_level_resource_managers: the kubelet 1.36 alpha gate PodLevelResourceManagers.
Off by default, as the kubelet; "on" is refused as not implemented (the engine computes the pod-scope
allocation, tests/engine/test_pod_level_resource_managers.py, but nothing applies it), never ignored."""

from __future__ import annotations

import pytest

from nri_pinner.config import ConfigError, Settings, load
from nri_pinner.config.validate import to_toml


def test_off_by_default_as_the_kubelets_gate() -> None:
    assert load("").topology_manager.pod_level_resource_managers is False
    assert load("[topology_manager]\npod_level_resource_managers = false\n") == Settings()


@pytest.mark.parametrize("scope", ["container", "pod"])
def test_on_is_refused_as_not_implemented_at_its_line(scope: str) -> None:
    text = f'[topology_manager]\nscope = "{scope}"\npod_level_resource_managers = true\n'
    with pytest.raises(ConfigError) as err:
        load(text, "c.toml")
    assert "c.toml:3:1: topology_manager.pod_level_resource_managers: not implemented yet (kubelet 1.36 alpha" \
        in str(err.value)


def test_a_non_boolean_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected bool, got str 'true'"):
        load('[topology_manager]\npod_level_resource_managers = "true"\n')


def test_the_effective_settings_read_back_the_same() -> None:
    settings = load("[topology_manager]\npod_level_resource_managers = false\n")
    assert load(to_toml(settings)) == settings
