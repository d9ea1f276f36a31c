"""Which real events make systemd re-apply a container scope's cgroup settings over a direct cpuset
write (guest part 20-systemd-triggers; docs/systemd-reapply.md). The fix under test: telling systemd
the written set (SetUnitProperties AllowedCPUs/AllowedMemoryNodes, runtime) first, so that every
re-application writes what the plugin wrote. Without it, set-property on the container's own scope
must revert the write — the proof that this check can fail."""

from __future__ import annotations

import json
from typing import Any

import pytest

# Triggers that re-apply the watched scope (a1) by systemd's source: its own unit invalidated (a
# set-property, a runc update), every unit below a slice invalidated (IPAccounting), or a1 left
# invalidated by a daemon-reload/reexec and then realized with its slice's family (a sibling's update,
# a unit started or stopped in the pod). Each reverted a direct write in every run.
KNOWN_REVERTING = ("scope-set-property", "scope-runc-update", "pod-slice-ipaccounting",
                   "reload-then-sibling-runc-update", "reload-then-sibling-set-property",
                   "reload-then-scope-started-same-pod", "reexec-then-sibling-runc-update")


def _result(node_vm: Any) -> dict[str, Any]:
    part = node_vm.part("20-systemd-triggers")
    assert part.exit == 0, part.log[-4000:]
    result: dict[str, Any] = json.loads((part.dir / "triggers.json").read_text())
    if "skipped" in result:
        pytest.skip(result["skipped"])
    return result


def _trials(result: dict[str, Any], mode: str) -> dict[str, dict[str, Any]]:
    return {t["trigger"]: t for t in result["trials"] if t["mode"] == mode}


def _describe(trial: dict[str, Any]) -> str:
    watched = trial["after"]["a1"]
    return (f"{trial['trigger']}: cpuset.cpus {watched['cpuset_cpus']!r} (wrote "
            f"{trial['armed']['a1']['wrote_cpus']!r}), process {watched['cpus_allowed_list']!r}, "
            f"systemd {watched['systemd']}")


def test_every_trigger_ran(node_vm: Any) -> None:
    result = _result(node_vm)
    broken = [f"{t['mode']}/{t['trigger']}: {t['error']}" for t in result["trials"] if "error" in t]
    assert not broken
    assert set(_trials(result, "direct")) == set(_trials(result, "told"))


def test_a_told_scope_is_never_reverted(node_vm: Any) -> None:
    """(b): whatever re-applies the scope writes the value the plugin told systemd."""
    told = _trials(_result(node_vm), "told")
    reverted = [_describe(t) for t in told.values() if t["watched_reverted"]]
    assert not reverted
    # every scope that was told held too (the untold one, a3, is the no-AllowedCPUs case)
    others = [f"{name}: {t['reverted']}" for name, t in told.items() if set(t["reverted"]) - {"a3"}]
    assert not others


def test_known_triggers_revert_a_direct_write(node_vm: Any) -> None:
    """(a): today's behaviour without the D-Bus call — the check above can fail. A sibling's update
    reverts a1 only once a reload has left a1 invalidated (docs/systemd-reapply.md)."""
    direct = _trials(_result(node_vm), "direct")
    for name in KNOWN_REVERTING:
        trial = direct[name]
        assert trial["watched_reverted"], _describe(trial)
        after = trial["after"]["a1"]
        # systemd wrote its stale AllowedCPUs back, and the process followed the cgroup
        assert after["cpuset_cpus"] == after["cpus_allowed_list"] == after["systemd"]["AllowedCPUs"]


def test_the_bus_takes_root_without_capabilities(node_vm: Any) -> None:
    """The plugin's unit runs as root with an empty capability set: systemd's manage-units check is
    by uid only, on its private socket (and on the system bus)."""
    bus = _result(node_vm)["bus"]
    private = bus["private"]
    assert private["root"]["ok"], private["root"]
    assert private["root_no_caps"]["ok"], private["root_no_caps"]
    assert private["root_no_caps"]["cap_eff"] == "0000000000000000"
    assert private["root_no_caps_readonly_mount"]["ok"], private["root_no_caps_readonly_mount"]
    assert not private["nobody"]["ok"]
    assert private["nobody"].get("uid") == 65534, private["nobody"]  # refused by systemd, not by a file mode
    print(f"\nSetUnitProperties in the guest (TCG): private {bus['timing_private']}, "
          f"system bus {bus.get('timing_system_bus')}")
