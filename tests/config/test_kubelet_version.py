"""cpu_manager.kubelet_version (the kubelet release the allocator follows) and
cpu_manager.post_release_fixes (upstream fixes merged after it: refused until built)."""

from __future__ import annotations

import pytest

from nri_pinner.config import ConfigError, Settings, load
from nri_pinner.config.validate import to_toml
from nri_pinner.engine.cpumanager.releases import KUBELET_RELEASES, POST_RELEASE_FIXES


def test_default_follows_the_newest_release_and_asks_for_no_later_fix() -> None:
    cm = load("").cpu_manager
    assert (cm.kubelet_version, cm.post_release_fixes) == ("1.36", ())


@pytest.mark.parametrize(("written", "release"), [("1.32", "1.32"), ("v1.33", "1.33"), ("1.34.2", "1.34"),
                                                   ("v1.36.0", "1.36")])
def test_kubelet_version_spellings(written: str, release: str) -> None:
    settings = load(f'[cpu_manager]\nkubelet_version = "{written}"\n')
    assert settings.cpu_manager.kubelet_version == release
    assert load(to_toml(settings)) == settings  # the effective settings read back the same


@pytest.mark.parametrize(("value", "reason"), [
    ('"1.31"', "kubelet release '1.31' is not one the allocator follows; known: 1.32, 1.33, 1.34, 1.35, 1.36"),
    ('"1.37"', "kubelet release '1.37' is not one the allocator follows"),
    ('"latest"', "'latest' is not a kubelet version"),
    ("1.32", "expected str, got float 1.32"),
])
def test_bad_kubelet_version_is_refused_at_its_line(value: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(f"[cpu_manager]\npolicy = \"static\"\nkubelet_version = {value}\n", "c.toml")
    assert f"c.toml:3:1: cpu_manager.kubelet_version: {reason}" in str(err.value)


@pytest.mark.parametrize("pr", sorted(POST_RELEASE_FIXES))
def test_post_release_fix_is_refused_as_not_implemented(pr: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(f'[cpu_manager]\npost_release_fixes = ["{pr}"]\n', "c.toml")
    message = str(err.value)
    assert f"c.toml:2:1: cpu_manager.post_release_fixes: '{pr}': not implemented yet (" in message
    assert POST_RELEASE_FIXES[pr] in message


def test_post_release_fixes_name_known_prs_only() -> None:
    assert set(POST_RELEASE_FIXES) == {"kubernetes#139456", "kubernetes#140498"}
    with pytest.raises(ConfigError, match="unknown value 'kubernetes#131850'"):
        load('[cpu_manager]\npost_release_fixes = ["kubernetes#131850"]\n')  # released in 1.34: kubelet_version


def test_empty_list_is_the_default() -> None:
    assert load("[cpu_manager]\npost_release_fixes = []\n") == Settings()


CPU_OPTIONS = ("full-pcpus-only", "distribute-cpus-across-numa", "align-by-socket", "distribute-cpus-across-cores",
               "strict-cpu-reservation", "prefer-align-cpus-by-uncorecache")


@pytest.mark.parametrize("release", KUBELET_RELEASES)
def test_every_policy_option_is_accepted_with_every_kubelet_version(release: str) -> None:
    """No feature gate is read: an option's alpha/beta/GA stage in that kubelet release does not matter
    (docs/kubelet-compatibility.md, option stages)."""
    for option in CPU_OPTIONS:
        cm = load(f'[cpu_manager]\nkubelet_version = "{release}"\npolicy_options = ["{option}"]\n').cpu_manager
        assert (cm.kubelet_version, cm.policy_options) == (release, frozenset({option}))
    tm = load(f'[cpu_manager]\nkubelet_version = "{release}"\n[topology_manager]\n'
              'policy_options = { prefer-closest-numa-nodes = "true", max-allowable-numa-nodes = "16" }\n')
    assert tm.topology_manager.policy_options == {"prefer-closest-numa-nodes"}
    assert tm.topology_manager.max_allowable_numa_nodes == 16
