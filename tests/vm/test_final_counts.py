"""The judge of part 30's final counts (tests/vm/final_counts.py) on made-up lines: no boot needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .final_counts import judge, load


def _entry(unit_failed: int = 0, repairs: int = 0, drifts: int = 0, **extra: Any) -> dict[str, Any]:
    return {"test": "t[containerd-2.1]", "runtime": "2.1", "pool_on_qos_slices": True, "drifts_written": drifts,
            "reconcile_repairs": repairs, "repaired_never_drifted": [],
            "cgroup_writes": {"unit_calls": 7, "unit_failed": unit_failed, "failed": 0, "qos_slices": 2}, **extra}


def test_clean_counts_pass_and_are_totalled() -> None:
    lines, problems = judge([_entry(repairs=3, drifts=3), _entry()], knob_on=True)
    assert problems == []
    assert lines[-1] == ("total containerd-2.1: instances 2, read 2, setting_on 2, unit_calls 14, unit_failed 0, "
                         "failed 0, qos_slices 4, repairs 3, drifts_written 3")


def test_a_failed_unit_call_or_a_repair_beyond_the_drifts_fails_only_with_the_knob_on() -> None:
    bad = [_entry(unit_failed=1), _entry(repairs=2, drifts=1), _entry(repairs=1, drifts=1,
                                                                        repaired_never_drifted=["abc"])]
    _, problems = judge(bad, knob_on=True)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "unit_failed 1", "2 repairs but 1 drifts written", "repaired, never drifted: ['abc']"]
    assert judge(bad, knob_on=False)[1] == []
    # an instance its scenario kept off the setting (the per-scope sampler, the untold control): printed only
    off = [_entry(), _entry(unit_failed=4, pool_on_qos_slices=False), _entry(repairs=1, pool_on_qos_slices=False),
           _entry(repairs=1, drifts=1, repaired_never_drifted=["abc"], pool_on_qos_slices=False)]
    lines, problems = judge(off, knob_on=True)
    assert problems == [] and "setting off, unit_calls 7, unit_failed 4" in lines[1]


def test_unread_counts_alone_or_a_knob_that_reached_no_plugin_fail() -> None:
    unread = {"test": "t", "runtime": "1.7", "drifts_written": 0, "status_error": "CalledProcessError(1)"}
    assert judge([unread], knob_on=True)[1] == ["no plugin instance's counts were read (1 recorded)",
                                                "NRI_PINNER_E2E_POOL_ON_QOS_SLICES=1 but no instance ran with "
                                                "reconcile.systemd_pool_on_qos_slices"]
    assert judge([unread, _entry()], knob_on=True)[1] == []
    assert judge([_entry(pool_on_qos_slices=False)], knob_on=True)[1] != []


def test_load_reads_json_lines_and_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert load(tmp_path) == []
    (tmp_path / "final-counts.jsonl").write_text('{"test": "a"}\n\n{"test": "b"}\n')
    assert [e["test"] for e in load(tmp_path)] == ["a", "b"]
