"""The one validation path (config --check, run, install, the unit's pre-start check): every problem at
once with line and column, "did you mean", host checks against real sysfs fixtures, and the effective
settings printed as TOML that loads back to the same settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nri_pinner.config import ConfigError, Settings, load
from nri_pinner.config.positions import key_positions
from nri_pinner.config.validate import check_text, to_json, to_toml

REPO = Path(__file__).resolve().parents[2]
VM_2CPU = str(REPO / "tests" / "fixtures" / "sysfs" / "vm-2cpu")

SIX_ERRORS = """\
sysfs_rot = "/"
[cpu_manager]
reserved_cpus = "0-"
isolated_cpu = "unused"
[topology_manager]
policy = "single-numa"
[nri]
plugin_index = "9"
[metrics]
port = 0
"""


def problems(text: str, host: bool = False, source: str = "c.toml") -> list[str]:
    with pytest.raises(ConfigError) as info:
        check_text(text, source, host=host)
    assert len(info.value.problems) == len(str(info.value).splitlines())
    return [str(p) for p in info.value.problems]


def test_every_error_at_once_with_line_column_and_did_you_mean() -> None:
    found = problems(SIX_ERRORS)
    assert len(found) == 6, found
    assert found[0] == "c.toml:1:1: sysfs_rot: unknown key; did you mean 'sysfs_root'?"
    assert found[1].startswith("c.toml:3:1: cpu_manager.reserved_cpus: ")
    assert found[2] == "c.toml:4:1: cpu_manager.isolated_cpu: unknown key; did you mean 'isolated_cpus'?"
    assert found[3].startswith("c.toml:6:1: topology_manager.policy: must be one of") and \
        found[3].endswith("did you mean 'single-numa-node'?")
    assert found[4].startswith("c.toml:8:1: nri.plugin_index: ")
    assert found[5].startswith("c.toml:10:1: metrics.port: ")


def test_syntax_error_has_tomllib_line_and_column() -> None:
    (found,) = problems('[nri]\nsocket = "/x"\nplugin_index = 90 90\n')
    assert found.startswith("c.toml:3:19: not valid TOML: "), found
    (found,) = problems("[cpu_manager\n")
    assert found.startswith("c.toml:1:") and "not valid TOML" in found


def test_unknown_policy_option_value_gets_a_suggestion() -> None:
    (found,) = problems('[cpu_manager]\npolicy_options = ["full-pcpu-only"]\n')
    assert "did you mean 'full-pcpus-only'?" in found and found.startswith("c.toml:2:1:")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # What `run` refused while `config --check` accepted it (issue 27).
        ('reserved_cpus = "0,99"', ["c.toml:3:1: cpu_manager.reserved_cpus: on this host: reserved CPUs 99"]),
        ('policy_options = ["full-pcpus-only", "distribute-cpus-across-cores"]',
         ["c.toml:3:1: cpu_manager.policy_options: on this host: static policy options full-pcpus-only and "
          "distribute-cpus-across-cores can not be used at the same time"]),
        ('reserved_cpus = "0,99"\npolicy_options = ["full-pcpus-only", "distribute-cpus-across-cores"]',
         ["c.toml:3:1: cpu_manager.reserved_cpus: on this host: reserved CPUs 99",
          "c.toml:4:1: cpu_manager.policy_options: on this host: static policy options"]),
    ],
)
def test_host_checks_are_what_run_refuses(text: str, expected: list[str]) -> None:
    found = problems(f'sysfs_root = "{VM_2CPU}"\n[cpu_manager]\n{text}\n', host=True)
    assert len(found) == len(expected), found
    for got, want in zip(found, expected, strict=True):
        assert got.startswith(want), (got, want)
    # without the host checks the same file is valid (it may be meant for a bigger node)
    check_text(f'sysfs_root = "{VM_2CPU}"\n[cpu_manager]\n{text}\n', "c.toml", host=False)


def test_unreadable_sysfs_is_a_host_problem(tmp_path: Path) -> None:
    (found,) = problems(f'sysfs_root = "{tmp_path}"\n', host=True)
    assert found.startswith("c.toml:1:1: sysfs_root: cannot read the CPU topology under"), found


def test_run_refuses_what_check_refuses() -> None:
    """`run` builds the engine the same way; the host check must not be stricter or looser."""
    from nri_pinner.engine.admission_engine import Engine
    from nri_pinner.engine.topology.sysfs import discover

    text = f'sysfs_root = "{VM_2CPU}"\n[cpu_manager]\nreserved_cpus = "0,99"\n'
    with pytest.raises(ValueError, match="not online"):
        Engine.from_settings(load(text), discover(VM_2CPU))
    assert problems(text, host=True)


def test_effective_settings_as_toml_load_back_identically() -> None:
    text = f"""sysfs_root = "{VM_2CPU}"
[cpu_manager]
reserved_cpus = "1"
policy_options = ["strict-cpu-reservation", "full-pcpus-only"]
[topology_manager]
policy = "single-numa-node"
[log]
file = "/var/log/a \\"b\\".log"
"""
    settings = check_text(text, "c.toml")
    rendered = to_toml(settings)
    assert load(rendered, "rendered") == settings
    assert load(to_toml(Settings())) == Settings()
    assert 'reserved_cpus = "1"' in rendered and "Settings(" not in rendered
    data = json.loads(to_json(settings))
    assert data["cpu_manager"]["policy_options"] == ["full-pcpus-only", "strict-cpu-reservation"]
    assert data["cpu_manager"]["reserved_cpus"] == "1"


def test_key_positions_follow_tables_dotted_keys_inline_tables_and_skip_strings() -> None:
    text = """# comment
top = 1
[a]
x = [
  "y = 2",
]
s = '''
fake = 3
'''
t = { k = 1, "q.r" = 2 }
[a.b]
d.e = 4
[[arr]]
z = 5
"""
    pos = key_positions(text)
    assert pos[("top",)] == (2, 1)
    assert pos[("a", "x")] == (4, 1) and ("a", "y") not in pos and ("a", "fake") not in pos
    assert pos[("a", "s")] == (7, 1) and pos[("a", "t")] == (10, 1)
    assert pos[("a", "t", "k")] == (10, 7) and pos[("a", "t", "q.r")] == (10, 14)
    assert pos[("a", "b", "d", "e")] == (12, 1) and pos[("arr", "z")] == (14, 1)


# -- issue 35: what `config --check` let through or printed badly -----------------------------------

@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[cpu_manager]\nreserved_cpus = \"0\"\n[cpu_manager]\n", "c.toml:3:13: not valid TOML: table [cpu_manager] "
                                                                  "declared twice"),
        ("[a.b]\n[a.b]\n", "c.toml:2:5: not valid TOML: table [a.b] declared twice"),
    ],
)
def test_a_table_declared_twice_is_named_as_the_file_names_it(text: str, expected: str) -> None:
    (found,) = problems(text)
    assert found == expected
    assert "('" not in found


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0", "::", "::1", "fe80::1", "localhost",
                                     "metrics.node-1.example", "node1."])
def test_metrics_address_accepts_ip_addresses_and_host_names(address: str) -> None:
    assert load(f'[metrics]\naddress = "{address}"\n').metrics.address == address


@pytest.mark.parametrize("address", ["not an address", "", "127.0.0.1:9766", "http://localhost", "-bad.example",
                                     "300.1.2.3", "a..b"])
def test_metrics_address_refuses_what_cannot_be_bound(address: str) -> None:
    (found,) = problems(f'[metrics]\naddress = "{address}"\n')
    assert found.startswith("c.toml:2:1: metrics.address: must "), found


def test_an_unresolvable_metrics_host_is_a_host_problem() -> None:
    text = f'sysfs_root = "{VM_2CPU}"\n[metrics]\nenabled = true\naddress = "no-such-host.invalid"\n'
    (found,) = problems(text, host=True)
    assert found.startswith("c.toml:4:1: metrics.address: on this host: 'no-such-host.invalid' does not resolve")
    check_text(text, "c.toml", host=False)  # meant for another host: its own resolver decides
    check_text(text.replace("enabled = true", "enabled = false"), "c.toml", host=True)  # not used: not resolved


def test_effective_settings_name_the_cpu_manager_policy() -> None:
    settings = check_text(f'sysfs_root = "{VM_2CPU}"\n', "c.toml")
    assert settings.cpu_manager.policy == "static"
    assert '[cpu_manager]\nreserved_cpus = ""\npolicy = "static"\n' in to_toml(settings)
    assert json.loads(to_json(settings))["cpu_manager"]["policy"] == "static"


def test_reserving_every_online_cpu_is_warned_not_refused() -> None:
    from nri_pinner.config.validate import host_warnings

    for reserve in ('reserved_cpus = "0-1"', "reserved_cpu_count = 2"):
        settings = check_text(f'sysfs_root = "{VM_2CPU}"\n[cpu_manager]\n{reserve}\n', "c.toml")
        (warning,) = host_warnings(settings)
        assert "are every online CPU (0-1)" in warning and "no CPU can be given to a container exclusively" in warning
    assert host_warnings(check_text(f'sysfs_root = "{VM_2CPU}"\n[cpu_manager]\nreserved_cpus = "0"\n', "c.toml")) == []


def test_removing_pod_quotas_without_cgroup_writes_is_warned() -> None:
    from nri_pinner.config.validate import host_warnings

    text = f'sysfs_root = "{VM_2CPU}"\n[cpu_manager]\nreserved_cpus = "0"\n[reconcile]\ncgroup_writes = false\n'
    (warning,) = host_warnings(check_text(text, "c.toml"))
    assert "pods' cgroups keep the kubelet's" in warning
    off = text.replace('reserved_cpus = "0"\n', 'reserved_cpus = "0"\ndisable_cpu_quota_with_exclusive_cpus = false\n')
    assert host_warnings(check_text(off, "c.toml")) == []
