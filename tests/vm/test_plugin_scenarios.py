"""The plugin's scenarios in the guest (part 30-plugin-scenarios): a selection of tests/e2e and the
guest-only tests/vm_guest, on containerd 1.7 and 2.1, under the boot's cgroup driver. Judged here
from the part's junit reports and its window-sampler figures."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import final_counts

PART = "30-plugin-scenarios"
RUNTIMES = ("containerd-1.7", "containerd-2.1")
# At least this many tests per runtime must pass (the part's selection may only grow): tests/e2e
# by profile, tests/vm_guest by driver (the untold-systemd proof needs systemd scopes).
E2E_MIN = {"ci": 0, "long": 17}
GUEST_MIN = {"systemd": 6, "cgroupfs": 5}  # ci; long adds two systemd-only ones (wanted below)
GUEST_TESTS = ("test_guaranteed_container_on_node1_gets_node1_memory",
               "test_single_numa_node_refuses_a_request_spanning_nodes",
               "test_init_cpus_reused_by_the_sidecar_and_the_app_gets_its_own",
               "test_no_shared_sample_on_an_exclusive_cpu_while_systemd_reapplies",
               "test_preinstalled_pins_and_systemd_holds_the_shared_pool",
               "test_a_created_container_is_not_checked_for_drift_until_it_starts")
SYSTEMD_ONLY = ("test_without_telling_systemd_its_reapplications_put_shared_containers_back",
                "test_no_shared_sample_on_an_exclusive_cpu_with_the_pool_on_the_qos_slices")
# both run in long only (the part's LONG_ONLY_GUEST): the untold control and the opt-in QoS-slice mode
UNTOLD, QOS_SLICES = SYSTEMD_ONLY
WINDOW_TRIGGERS = {"systemd": {"create", "churn", "qos-slices", "pod-slices", "daemon-reload", "sibling-update",
                               "own-scope", "started-in-pod"},
                   "cgroupfs": {"create", "churn", "sibling-update"}}


@dataclass(frozen=True)
class Case:
    suite: str
    name: str  # "test_x[containerd-1.7]"
    outcome: str  # passed | failed | error | skipped
    message: str

    @property
    def runtime(self) -> str:
        return next((r for r in RUNTIMES if f"[{r}]" in self.name), "")

    @property
    def function(self) -> str:
        return self.name.split("[", 1)[0]


def _part(node_vm: Any) -> Any:
    return node_vm.part(PART)


def _summary(node_vm: Any) -> dict[str, Any]:
    part = _part(node_vm)
    path = part.dir / "summary.json"
    assert path.is_file(), f"no summary.json (exit {part.exit}); log tail:\n{part.log[-4000:]}"
    summary: dict[str, Any] = json.loads(path.read_text())
    return summary


def _runtimes(summary: dict[str, Any]) -> tuple[str, ...]:
    """The runtimes the part ran on: both in long, containerd 2.1 in ci (the part's RUNTIMES)."""
    ran = tuple(summary.get("runtimes", RUNTIMES))
    assert ran and set(ran) <= set(RUNTIMES), ran
    if summary["profile"] == "long":
        assert ran == RUNTIMES, ran
    return ran


def _cases(directory: Path, suite: str, runtimes: tuple[str, ...] = RUNTIMES) -> list[Case]:
    cases = []
    for runtime in runtimes:
        junit = directory / f"junit-{suite}-{runtime.removeprefix('containerd-')}.xml"
        assert junit.is_file(), f"{junit} missing"
        cases += _junit_cases(junit, suite)
    return cases


def _junit_cases(junit: Path, suite: str) -> list[Case]:
    cases = []
    for tc in ET.parse(junit).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            found = tc.find(tag)
            if found is not None:
                outcome, message = name, (found.get("message") or found.text or "")[:1500]
                break
        cases.append(Case(suite, tc.get("name", ""), outcome, message))
    return cases


def test_part_exited_zero(node_vm: Any) -> None:
    part = _part(node_vm)
    assert part.exit == 0, part.log[-6000:]


def test_every_selected_test_passed_on_each_runtime(node_vm: Any) -> None:
    summary = _summary(node_vm)
    directory = _part(node_vm).dir
    e2e_runs = [r for name, r in summary["runs"].items() if name.startswith("e2e-")]
    runtimes = _runtimes(summary)
    cases = (_cases(directory, "e2e", runtimes) if e2e_runs else []) + _cases(directory, "guest", runtimes)
    bad = [f"{c.suite}/{c.name}: {c.outcome}: {c.message}" for c in cases if c.outcome in ("failed", "error")]
    assert not bad, "\n".join(bad)
    driver = node_vm.driver
    allowed_skips = set(SYSTEMD_ONLY) if driver != "systemd" else set()
    skipped = [f"{c.suite}/{c.name}: {c.message}" for c in cases
               if c.outcome == "skipped" and c.function not in allowed_skips]
    assert not skipped, "\n".join(skipped)
    for runtime in runtimes:
        passed = {c.function for c in cases if c.outcome == "passed" and c.runtime == runtime}
        e2e = [c for c in cases if c.suite == "e2e" and c.outcome == "passed" and c.runtime == runtime]
        guest = [c for c in cases if c.suite == "guest" and c.outcome == "passed" and c.runtime == runtime]
        assert len(e2e) >= E2E_MIN[summary["profile"]], (runtime, sorted(c.name for c in e2e))
        assert len(guest) >= GUEST_MIN[driver], (runtime, sorted(c.name for c in guest))
        wanted = set(GUEST_TESTS) | (set(SYSTEMD_ONLY) if driver == "systemd" else set())
        if summary["profile"] != "long":
            wanted -= {UNTOLD, QOS_SLICES}
        assert wanted <= passed, (runtime, sorted(wanted - passed))
        selected = {t.rsplit("::", 1)[-1] for r in e2e_runs for t in r["targets"]}
        assert selected <= passed, (runtime, sorted(selected - passed))


def test_window_sampler_figures(node_vm: Any) -> None:
    """0 samples with a shared container on an exclusive CPU, every trigger sampled, on both runtimes;
    under systemd (long profile) the QoS-slice mode's run is as clean, and the untold run (the plugin's
    D-Bus calls off) shows the reverts the check catches."""
    summary = _summary(node_vm)
    figures: dict[str, Any] = summary["figures"]
    driver = node_vm.driver
    lines = []
    for runtime in _runtimes(summary):
        fig = figures.get(f"window-{runtime}")
        assert fig is not None, f"no window figures for {runtime}: {sorted(figures)}"
        per: dict[str, Any] = fig["per_trigger"]
        assert set(per) == WINDOW_TRIGGERS[driver], sorted(per)
        assert all(e["samples"] > 0 for e in per.values()), per
        assert fig["violations"] == 0, per
        lines.append(f"{runtime}: {fig['samples_in_windows']} samples in windows, {fig['violations']} violations")
        if driver == "systemd" and summary["profile"] == "long":
            untold = figures.get(f"window-untold-{runtime}")
            assert untold is not None, sorted(figures)
            assert untold["per_trigger"]["own-scope"]["violations"] > 0, untold["per_trigger"]
            lines.append(f"{runtime} untold: " + ", ".join(
                f"{t} {e['violations']}/{e['samples']}" for t, e in untold["per_trigger"].items()))
        if driver == "systemd" and summary["profile"] == "long":
            # issue 45: the pool on the QoS slices, effective sets sampled (the guest test asserts the same)
            slices = figures.get(f"window-qos-slices-{runtime}")
            assert slices is not None, sorted(figures)
            assert set(slices["per_trigger"]) == WINDOW_TRIGGERS[driver], sorted(slices["per_trigger"])
            assert all(e["samples"] > 0 for e in slices["per_trigger"].values()), slices["per_trigger"]
            assert slices["violations"] == 0, slices["per_trigger"]
            writes = slices["cgroup_writes"]
            lines.append(f"{runtime} qos-slices: {slices['samples_in_windows']} samples in windows, "
                         f"{slices['violations']} violations, unit_calls {writes['unit_calls']}, unit_failed "
                         f"{writes['unit_failed']}, qos_slices {writes['qos_slices']}")
    print("\nvm: window sampler " + "; ".join(lines))


def test_final_counts_of_every_plugin_instance(node_vm: Any) -> None:
    """Issue 45: with NRI_PINNER_E2E_POOL_ON_QOS_SLICES=1 in the boot, every instance with the setting has
    unit_failed 0 and no repair beyond its scenario's own drifts (tests/vm/final_counts.py); the others, and
    a boot without the knob, printed only."""
    summary = _summary(node_vm)
    knob_on = summary["env"].get(final_counts.KNOB) == "1"
    entries = final_counts.load(_part(node_vm).dir)
    lines, problems = final_counts.judge(entries, knob_on)
    print(f"\nvm: final counts ({final_counts.KNOB} {'on' if knob_on else 'off'}):\n  " + "\n  ".join(lines))
    assert not problems, "\n".join(problems)
