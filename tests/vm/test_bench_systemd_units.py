"""The systemd-driver pass in a real systemd (guest part 50-bench-systemd-units): every scope told in
one batch per pass, none refused, and systemd left holding what was written. Prints the cost."""

from __future__ import annotations

import json
from typing import Any

import pytest


def test_systemd_holds_every_written_cpuset_and_the_pass_cost_is_reported(node_vm: Any) -> None:
    part = node_vm.part("50-bench-systemd-units")
    assert part.exit == 0, part.log[-3000:]
    result = json.loads((part.dir / "bench.json").read_text())
    if "skipped" in result:
        pytest.skip(result["skipped"])
    told = result["systemd+writes"]
    assert told["calls_per_pass"] == result["scopes"] == 100
    assert told["failed_calls"] == 0
    assert result["scopes_disagreeing_with_systemd"] == 0
    print(f"\nguest (TCG) pass of {result['scopes']} scopes: writes {result['writes']['cpu_ms_median']:.1f} ms CPU; "
          f"systemd+writes {told['cpu_ms_median']:.1f} ms CPU, {told['wall_ms_median']:.1f} ms wall, "
          f"systemd {told['pid1_cpu_ms_median']:.1f} ms CPU")
    if "slice" in result:  # long profile: the pool on the slice, the scopes keeping every CPU
        held = result["slice"]
        assert held["failed_calls"] == 0 and held["calls_per_pass"] == 1
        assert held["scope_effective_not_the_slice"] == 0  # the kernel's v2 rule: own ∩ the parent's
        assert result["slice_disagreeing_with_systemd"] == 0
        print(f"pool on the slice: {held['cpu_ms_median']:.1f} ms CPU, {held['wall_ms_median']:.1f} ms wall, "
              f"systemd {held['pid1_cpu_ms_median']:.1f} ms CPU")
