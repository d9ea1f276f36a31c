"""policy_options as a list of names or as the kubelet's name = "value" table (issue 21, item 6)."""

from __future__ import annotations

import pytest

from nri_pinner.config import ConfigError, load
from nri_pinner.config.policy_options import GO_FALSE, GO_TRUE, go_atoi, go_parse_bool

# Go strconv.ParseBool accepts exactly these spellings
TRUE = ["1", "t", "T", "TRUE", "true", "True"]
FALSE = ["0", "f", "F", "FALSE", "false", "False"]


@pytest.mark.parametrize("value", TRUE)
def test_table_true_spellings_switch_options_on(value: str) -> None:
    s = load(f'[cpu_manager]\npolicy_options = {{ full-pcpus-only = "{value}", align-by-socket = "{value}" }}')
    assert s.cpu_manager.policy_options == {"full-pcpus-only", "align-by-socket"}


@pytest.mark.parametrize("value", FALSE)
def test_table_false_spellings_leave_options_off(value: str) -> None:
    s = load(f'[topology_manager]\npolicy_options = {{ prefer-closest-numa-nodes = "{value}" }}')
    assert s.topology_manager.policy_options == frozenset()


def test_kubelet_yaml_pasted_as_a_toml_table() -> None:
    s = load('[cpu_manager.policy_options]\n"full-pcpus-only" = "true"\n"strict-cpu-reservation" = "false"\n'
             '[topology_manager.policy_options]\n"prefer-closest-numa-nodes" = "True"\n'
             '"max-allowable-numa-nodes" = "16"\n')
    assert s.cpu_manager.policy_options == {"full-pcpus-only"}
    assert s.topology_manager.policy_options == {"prefer-closest-numa-nodes"}
    assert s.topology_manager.max_allowable_numa_nodes == 16


def test_toml_booleans_and_integers_are_their_spelling() -> None:
    s = load("[cpu_manager]\npolicy_options = { full-pcpus-only = true }\n"
             "[topology_manager]\npolicy_options = { max-allowable-numa-nodes = 8 }")
    assert s.cpu_manager.policy_options == {"full-pcpus-only"}
    assert s.topology_manager.max_allowable_numa_nodes == 8


@pytest.mark.parametrize("value", ["yes", "on", "tRUE", "", " true", "2"])
def test_other_bool_spellings_get_the_kubelets_message(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(f'[cpu_manager]\npolicy_options = {{ full-pcpus-only = "{value}" }}')
    assert (f'cpu_manager.policy_options: bad value for option "full-pcpus-only": '
            f'strconv.ParseBool: parsing "{value}": invalid syntax') in str(err.value)


@pytest.mark.parametrize(("value", "reason"), [("7", "should not be less than 8"), ("0", "should not be less than 8"),
                                               ("-9", "should not be less than 8"), ("eight", "invalid syntax"),
                                               ("8.0", "invalid syntax"), ("99999999999999999999", "out of range")])
def test_max_allowable_numa_nodes_is_checked_like_the_kubelet(value: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        load(f'[topology_manager]\npolicy_options = {{ max-allowable-numa-nodes = "{value}" }}')


def test_max_allowable_numa_nodes_needs_a_value_in_list_form() -> None:
    with pytest.raises(ConfigError, match="takes a value"):
        load("[topology_manager]\npolicy_options = ['max-allowable-numa-nodes']")


def test_unknown_names_are_refused_in_both_forms() -> None:
    for text in ("policy_options = ['full-pcpus']", 'policy_options = { full-pcpus = "true" }'):
        with pytest.raises(ConfigError, match="unknown value 'full-pcpus'"):
            load(f"[cpu_manager]\n{text}")


def test_parse_bool_and_atoi_match_go() -> None:
    assert set(TRUE) == GO_TRUE and set(FALSE) == GO_FALSE
    assert all(go_parse_bool("x", v) for v in TRUE) and not any(go_parse_bool("x", v) for v in FALSE)
    assert go_atoi("x", "+12") == 12 and go_atoi("x", "-3") == -3
    for bad in ("", "+", "1_000", "0x10", " 1", "١٢"):
        with pytest.raises(ValueError, match="invalid syntax"):
            go_atoi("x", bad)
