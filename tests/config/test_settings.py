import re
from pathlib import Path

import pytest

from nri_pinner.config import ConfigError, load, load_file
from nri_pinner.engine.cpuset import CPUSet

FULL = """
sysfs_root = "/host"
[cpu_manager]
reserved_cpus = "0,4"
policy_options = ["full-pcpus-only", "strict-cpu-reservation"]
isolated_cpus = "unused"
[topology_manager]
policy = "single-numa-node"
scope = "pod"
policy_options = ["prefer-closest-numa-nodes"]
[nri]
socket = "/run/x/nri.sock"
plugin_index = "10"
on_reject = "shared"
[reconcile]
period_seconds = 2
[metrics]
enabled = true
port = 9100
"""


def test_defaults_from_empty_file() -> None:
    s = load("")
    assert s.topology_manager.policy == "none"
    assert s.cpu_manager.reserved_cpus is None
    assert s.nri.socket == "/var/run/nri/nri.sock"
    assert s.reconcile.period_seconds == 10.0


def test_full_file_parses_every_section() -> None:
    s = load(FULL)
    assert s.sysfs_root == "/host"
    assert s.cpu_manager.reserved_cpus == CPUSet([0, 4])
    assert s.cpu_manager.policy_options == {"full-pcpus-only", "strict-cpu-reservation"}
    assert s.cpu_manager.isolated_cpus == "unused"
    assert (s.topology_manager.policy, s.topology_manager.scope) == ("single-numa-node", "pod")
    assert s.nri.plugin_index == "10" and s.nri.on_reject == "shared"
    assert s.reconcile.period_seconds == 2.0  # an int is accepted for a float key
    assert s.metrics.enabled and s.metrics.port == 9100


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bogus = 1", "bogus: unknown key"),
        ("[cpu_manager]\nreserved = '0'", "cpu_manager.reserved: unknown key"),
        ("[cpu_manager]\nreserved_cpus = '3-1'", "cpu_manager.reserved_cpus: range '3-1'"),
        ("[cpu_manager]\nreserved_cpus = '0'\nreserved_cpu_count = 2", "not both"),
        ("[cpu_manager]\npolicy_options = ['full-pcpus']", "unknown value 'full-pcpus'"),
        ("[cpu_manager]\npolicy = 'none'", "only 'static' is implemented"),
        ("[topology_manager]\npolicy = 'strict'", "must be one of none, best-effort"),
        ("[topology_manager]\npolicy_options = ['max-allowable-numa-nodes']", "takes a value"),
        ("[hints]\nproviders = ['cpu', 'nic']", "unknown value 'nic'; did you mean 'nics'?"),
        ("[podresources]\nrefresh_seconds = 0", "podresources.refresh_seconds: must be between 0.1 and 3600"),
        ("[podresources]\nsocket = ''", "podresources.socket: must not be empty"),
        ("[podresources]\ntimeout_seconds = 'x'", "expected float, got str"),
        ("[podresources]\nsockets = '/x'", "podresources.sockets: unknown key; did you mean 'socket'?"),
        ("[memory_manager]\nreserved_memory = '0:memory=lots'", "bad quantity"),
        ("[memory_manager]\nreserved_memory = 'x:memory=1Gi'", "expected NODE:resource=quantity"),
        ("[memory_manager]\nmems = 'some'", "mems"),
        ("[hints]\nproviders = []", "cannot be turned off"),
        ("[nri]\nplugin_index = '9'", "exactly two digits"),
        ("[nri]\nplugin_name = 'a b'", "plugin_name"),
        ("[nri]\nbudget_margin_ms = true", "expected int, got bool"),
        ("[metrics]\nport = 70000", "TCP port"),
        ("[reconcile]\nperiod_seconds = -1", "must not be negative"),
        ("[cpu_manager", "not valid TOML"),
        ("[cpu_manager]\nreserved_cpus = '0-999999999'", "out of range (limit 8191)"),
        ("[cpu_manager]\nreserved_cpus = '\u00b2'", "bad CPU id"),
        ("cpu_manager = 3", "cpu_manager: expected dict"),
    ],
)
def test_bad_config_names_file_key_and_reason(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(text, "cfg.toml")
    assert expected in str(info.value)
    assert re.match(r"cfg\.toml:\d+:\d+: ", str(info.value)), str(info.value)  # file:line:column:


def test_the_kubelets_quota_gate_is_mirrored_on_by_default() -> None:
    """cpu_manager.disable_cpu_quota_with_exclusive_cpus: the kubelet's DisableCPUQuotaWithExclusiveCPUs
    (beta, default true since v1.33); a boolean, like the kubelet's --feature-gates value."""
    assert load("").cpu_manager.disable_cpu_quota_with_exclusive_cpus is True
    off = load("[cpu_manager]\ndisable_cpu_quota_with_exclusive_cpus = false")
    assert off.cpu_manager.disable_cpu_quota_with_exclusive_cpus is False
    with pytest.raises(ConfigError) as info:
        load("[cpu_manager]\ndisable_cpu_quota_with_exclusive_cpus = 'false'", "cfg.toml")
    assert str(info.value).startswith("cfg.toml:2:") and "expected bool, got str" in str(info.value)


def test_load_file_reports_unreadable_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_file(tmp_path / "missing.toml")
    p = tmp_path / "c.toml"
    p.write_text("[nri]\nsocket = '/x.sock'\n")
    assert load_file(p).nri.socket == "/x.sock"


def test_embedded_default_file_equals_built_in_defaults() -> None:
    from importlib.resources import files

    from nri_pinner.config import Settings

    text = files("nri_pinner.config").joinpath("default.toml").read_text()
    assert load(text) == Settings()
