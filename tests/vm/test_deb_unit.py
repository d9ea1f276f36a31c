"""The trixie .deb and its systemd unit on a real systemd (guest part 40-deb-unit): installed offline,
enabled, pinning through direct cgroup writes from inside the unit's sandbox (no fallback to NRI
updates), systemd told over its bus, exposure within the README's figure, and an upgrade that
restarts the service and keeps it pinning.

The part records; this file judges (its JSON: $OUT/deb-unit.json). The .deb comes from
tests/vm/prepare_deb.py, run on the host before the boot.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PART = "40-deb-unit"
RESERVED = {0}  # the part sets reserved_cpus = "0"
LOOKUP_UNIT = "nri-pinner-nic-lookup.service"


def cpus(text: str) -> set[int]:
    """A cpuset list ("1-3,6", or systemd's "1-3 6") as a set; "" → empty."""
    out: set[int] = set()
    for item in filter(None, re.split(r"[,\s]+", text.strip())):  # systemctl show: "0 2-7"
        lo, _, hi = item.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def readme_exposure() -> float:
    """The exposure figure the install guide (docs/install.md, "Install") gives for the unit."""
    found = re.search(r"`systemd-analyze security`\s+exposure (\d+\.\d+)", (REPO / "docs" / "install.md").read_text())
    assert found, "docs/install.md states no `systemd-analyze security` exposure figure"
    return float(found.group(1))


@pytest.fixture(scope="module")
def run(node_vm: Any) -> dict[str, Any]:
    part = node_vm.part(PART)
    path = part.dir / "deb-unit.json"
    assert path.is_file(), f"{PART} wrote no deb-unit.json (exit {part.exit}):\n{part.log[-4000:]}"
    result: dict[str, Any] = json.loads(path.read_text())
    steps = ", ".join(f"{k} {v['seconds']} s" for k, v in result.get("steps", {}).items())
    print(f"\n{PART} ({result.get('driver')}): {result.get('part_seconds')} s in the guest: {steps}")
    assert part.exit == 0 and not result["errors"], "\n".join(result["errors"]) or part.log[-4000:]
    return result


def test_the_package_installs_offline_and_the_service_is_active(run: dict[str, Any]) -> None:
    install = run["deb"]["install"]
    assert install["rc"] == 0, install["stdout"] + install["stderr"]
    assert run["config_check"]["rc"] == 0, run["config_check"]
    assert run["service"]["ActiveState"] == "active", run["service"]
    assert run["service"]["NRestarts"] == "0", run["service"]
    assert run["journal"]["tracebacks"] == [], run["journal"]["lines"][-80:]


def test_pool_changes_are_written_to_cgroups_with_no_fallback_to_nri_updates(run: dict[str, Any]) -> None:
    """health.cgroup_writes is None when the service turned writes off (every pool change then goes out
    as NRI updates); `failed` / `unit_failed` count containers left to an NRI update."""
    journal = run["journal"]
    assert journal["writes_off"] == [], journal["writes_off"]
    writes = run["status"]["health"]["cgroup_writes"]
    assert writes is not None, f"cgroup writes off under the unit: {journal['lines'][-40:]}"
    assert writes["containers"] >= 1 and writes["writes"] >= 1, writes
    assert writes["failed"] == 0 and writes.get("unit_failed", 0) == 0, writes
    assert journal["fallback_lines"] == [], journal["fallback_lines"]
    if run["driver"] == "systemd":
        assert writes["unit_calls"] >= 1, writes  # the Burstable scope was told over systemd's bus
    # A runtime record update (CRI, bounded by the pass wait) is no pool change: printed, not judged
    print(f"\nruntime record updates that failed under the unit: {len(journal.get('record_update_failures', []))}")


def test_the_guaranteed_cpu_is_exclusive_and_shared_containers_are_off_it(run: dict[str, Any]) -> None:
    assert run["pinned"], json.dumps(run["containers"], indent=1)
    g, b = run["containers"]["guaranteed"], run["containers"]["burstable"]
    own = cpus(g["cpuset.cpus"])
    assert len(own) == 1 and not own & RESERVED, g
    assert cpus(g["Cpus_allowed_list"]) == own, g
    for field in ("cpuset.cpus", "Cpus_allowed_list"):
        shared = cpus(b[field])
        assert shared and not shared & own, (field, b)
    assigned = {a["container_id"]: a for a in run["status"]["assignments"]}
    assert assigned[g["id"]]["exclusive"] and cpus(assigned[g["id"]]["cpus"]) == own
    assert not assigned[b["id"]]["exclusive"] and cpus(assigned[b["id"]]["cpus"]) == cpus(b["cpuset.cpus"])
    if run["driver"] == "systemd":  # systemd holds what was written: a re-application is a no-op
        assert cpus(b["scope"]["AllowedCPUs"]) == cpus(b["cpuset.cpus"]), b


def test_the_unit_sandbox_lets_the_writes_and_systemds_bus_through(run: dict[str, Any]) -> None:
    """A probe run with every [Service] setting of the installed unit: the cgroup files open for writing
    (access(W_OK) on the root may still say no: that is why the service no longer asks it), the NRI and
    CRI sockets connect, and systemd's private bus answers a manage-units call (SetUnitProperties)."""
    probe = run["probe"]
    assert probe["start_rc"] == 0, probe
    assert probe["open_cgroup_procs"] == "ok" and probe["write_container_cpuset"] == "ok", probe
    assert probe["container_cpuset_after"] == probe["container_cpuset_before"]
    # the runtime's sockets, on mounts the unit leaves read-only (only the cgroup fs is writable)
    assert probe["connect /var/run/nri/nri.sock"] == probe["connect /run/containerd/containerd.sock"] == "ok"
    # systemd's private socket (the service's default bus), twice on a fresh connection, and the system bus:
    # each call answered. Before systemd_units.connect waited for PID 1 to read BEGIN, a first call that
    # PID 1 read together with BEGIN sat unanswered in sd-bus's buffer (tests/service/test_sd_bus_handshake.py)
    for path in ("/run/systemd/private", "/run/dbus/system_bus_socket", "/run/systemd/private (again)"):
        bus = probe[path]
        assert "error" not in bus and bus["SetUnitProperties_self_CPUWeight"].startswith("ok"), (path, bus)
        if run["driver"] == "systemd":
            assert bus["SetUnitProperties_scope_AllowedCPUs"].startswith("ok"), (path, bus)
    # why connect() waits, on PID 1 itself: BEGIN and a call in one write, unanswered for 3 s; both calls
    # answered once a second one arrives
    assert probe["begin_with_call"] == {"before_next_call": [], "after_next_call": [1, 2]}, probe["begin_with_call"]


def test_the_exposure_is_measured_and_within_the_readme_figure(run: dict[str, Any]) -> None:
    security = run["security"]
    exposure = security["exposure"]
    assert exposure is not None, security["table"] + security["stderr"]
    print(f"\nsystemd-analyze security nri-pinner.service (systemd {security['systemd_version']}): {exposure}")
    assert exposure <= readme_exposure(), security["table"]
    assert security["verify"]["rc"] == 0, security["verify"]


def test_the_unit_draws_no_warnings_from_systemd(run: dict[str, Any]) -> None:
    """E.g. `System call … is not known, ignoring` when SystemCallFilter names calls systemd does not know."""
    assert run["journal"]["unknown_syscalls"] == [], run["journal"]["unit_warnings"]
    assert run["journal_boot_warnings"] == [], run["journal_boot_warnings"]


def test_an_upgrade_restarts_the_service_and_it_keeps_pinning(run: dict[str, Any]) -> None:
    up = run["upgrade"]
    assert up["dpkg"]["rc"] == 0, up["dpkg"]["stdout"] + up["dpkg"]["stderr"]
    assert up["dpkg"]["version"] == up["dpkg"]["deb_version"] != run["deb"]["install"]["version"]
    assert up["after"]["ActiveState"] == "active", up["after"]
    assert up["after"]["MainPID"] not in ("0", up["before"]["MainPID"]), (up["before"], up["after"])
    assert up["after"]["UnitFileState"] == "enabled", up["after"]
    # the restarted service kept the Guaranteed CPU, and pinned a new Guaranteed pod by cgroup writes
    kept = up["containers_after_restart"]["guaranteed"]
    assert cpus(kept["cpuset.cpus"]) == cpus(run["containers"]["guaranteed"]["cpuset.cpus"])
    assert up["pinned"], json.dumps(up["containers"], indent=1)
    own = cpus(up["containers"]["guaranteed"]["cpuset.cpus"]) | cpus(up["containers"]["guaranteed2"]["cpuset.cpus"])
    assert len(own) == 2 and not own & cpus(up["containers"]["burstable"]["Cpus_allowed_list"])
    writes = up["status"]["health"]["cgroup_writes"]
    assert writes is not None and writes["writes"] >= 1, writes
    assert writes["failed"] == 0 and writes.get("unit_failed", 0) == 0, writes
    assert up["journal"]["writes_off"] == [] and up["journal"]["tracebacks"] == [], up["journal"]["lines"][-60:]


def test_the_nic_lookup_service_holds_sys_admin_only_and_serves_the_plugins_sandbox(run: dict[str, Any]) -> None:
    """nri-pinner-nic-lookup.service came up with the plugin (the package's static Wants= link) holding
    CAP_SYS_ADMIN and nothing else, the plugin holding nothing. A oneshot with every [Service] setting of
    the installed nri-pinner.service (no capability, RestrictNamespaces=yes) cannot setns itself, and gets
    the links of a network namespace made after the service started (as containerd makes a pod's, under
    /run/netns) through the service's socket; a vanished namespace is the service's error, not a hang."""
    nic = run["nic_lookup"]
    assert nic["errors"] == [], "\n".join(nic["errors"])
    unit = nic["unit"]
    assert (unit["ActiveState"], unit["SubState"], unit["NRestarts"]) == ("active", "running", "0"), unit
    sys_admin = 1 << 21
    lookup, plugin = nic["lookup_process"], nic["plugin_process"]
    assert int(lookup["CapEff"], 16) == int(lookup["CapBnd"], 16) == sys_admin, lookup
    assert lookup["NoNewPrivs"] == "1" and lookup["Seccomp"] == "2", lookup
    assert int(plugin["CapEff"], 16) == 0, plugin
    assert nic["socket"] == "600 root socket", nic["socket"]
    probe = nic["probe"]
    assert probe["start_rc"] == 0 and "error" not in probe, probe
    assert int(probe["status"]["CapEff"], 16) == 0 and probe["status"]["Seccomp"] == "2", probe["status"]
    assert probe["direct"].startswith("SetnsRefused: [Errno 1]"), probe["direct"]
    assert [(x["name"], x["kind"], x["numa"]) for x in probe["service"]] == [("eth0", "veth", None)], probe
    assert probe["gone"].startswith("ServiceError: [Errno 2] No such file or directory"), probe["gone"]
    print(f"\nNIC lookup through the service from the plugin's sandbox: {probe['service_ms']} ms; "
          f"{LOOKUP_UNIT} exposure {nic['exposure']}")
    assert nic["journal"]["tracebacks"] == [] and nic["unit_warnings"] == [], nic["journal"]["lines"][-40:]
    assert nic["exposure"] is not None and nic["exposure"] <= 2.5, nic["security_table"]


def test_an_upgrade_restarts_the_nic_lookup_service_with_the_plugin(run: dict[str, Any]) -> None:
    before, after = run["nic_lookup"]["unit"], run["upgrade"]["nic_lookup_unit"]
    assert after["ActiveState"] == "active", after
    assert after["MainPID"] not in ("0", before["MainPID"]), (before, after)  # PartOf=nri-pinner.service

