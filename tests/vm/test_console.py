"""A boot that dies of a guest kernel fault says so in its failure's first line (issue: a test command a
newcomer can trust). The fixtures are built from a real failed boot's console lines: an int3 oops in
sched_clock_cpu, a second in pv_native_safe_halt through sysvec_call_function, then the panic; and a
panic without an oops. These run without QEMU."""

from __future__ import annotations

from pathlib import Path

import pytest

from .console import fault_summary, kernel_faults
from .guest import GuestRun, VMError

FIXTURES = Path(__file__).parent / "fixtures"


def _console(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_an_oops_is_named_with_its_function_vcpu_and_time() -> None:
    faults = kernel_faults(_console("console-oops-int3.log"))
    assert [f.describe() for f in faults] == [
        "Oops: int3: 0000 in sched_clock_cpu (vCPU 5) at 2.9 s",
        "Oops: int3: 0000 in pv_native_safe_halt (vCPU 2) at 2.9 s",
        "Kernel panic - not syncing: Fatal exception in interrupt at 2.9 s",
    ]


def test_a_panic_alone_is_named() -> None:
    assert fault_summary(_console("console-panic.log")) == (
        "guest kernel Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0) at 33.1 s")


def test_a_clean_boot_has_no_fault() -> None:
    assert fault_summary(_console("console-clean.log")) is None
    # the "end Kernel panic" trailer and a Call Trace alone are not new faults
    assert len(kernel_faults(_console("console-panic.log"))) == 1


def _run(tmp_path: Path, console: str) -> GuestRun:
    (tmp_path / "console.log").write_text(_console(console))
    return GuestRun(topology="2s2c2t", driver="systemd", parts=("10-node-facts",), run_dir=tmp_path,
                    out=tmp_path / "out", console=tmp_path / "console.log", boot_seconds=None, seconds=4.0,
                    image_seconds=0.1, timed_out=False, qemu_exit=0)


@pytest.mark.parametrize(("console", "first"), [
    ("console-oops-int3.log", "guest kernel Oops: int3: 0000 in sched_clock_cpu (vCPU 5) at 2.9 s; then "),
    ("console-panic.log", "guest kernel Kernel panic - not syncing: VFS: Unable to mount root fs"),
])
def test_a_part_that_did_not_run_fails_naming_the_fault_first(tmp_path: Path, console: str, first: str) -> None:
    with pytest.raises(VMError) as caught:
        _run(tmp_path, console).part("10-node-facts")
    first_line = str(caught.value).splitlines()[0]
    assert first_line.startswith(first)
    assert "VM part '10-node-facts' did not run" in first_line


def test_without_a_fault_the_failure_is_as_before(tmp_path: Path) -> None:
    with pytest.raises(VMError) as caught:
        _run(tmp_path, "console-clean.log").part("10-node-facts")
    assert str(caught.value).startswith("VM part '10-node-facts' did not run in the 2s2c2t/systemd boot")


def test_the_guest_kernel_did_not_fault(node_vm: GuestRun) -> None:
    """Every boot of the profile: a fault that did not stop the parts (an oops in a process, a BUG) is
    still a red run, never retried away."""
    assert node_vm.kernel_fault() is None, f"{node_vm.kernel_fault()} (console: {node_vm.console})"
