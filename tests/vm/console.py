"""What the guest kernel said went wrong, read from the serial console.

A boot that dies of a kernel fault (an oops, a BUG, a panic) fails every part after it; the failure's
first line must say so, not quote the middle of a stack trace. ``kernel_faults`` finds each fault's
headline and the function it hit; ``fault_summary`` joins them into that first line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_STAMP = r"^(?:\[\s*(?P<time>\d+\.\d+)\]\s*)?"
# The headlines Linux prints for a fault (arch/x86/kernel/dumpstack.c __die_header, kernel/panic.c panic,
# lib/bug.c, mm/fault reports, the soft/hard lockup watchdogs).
_HEADLINES = re.compile(
    _STAMP + r"(?P<what>Oops: .*?|Kernel panic - not syncing: .*|BUG: .*|general protection fault.*?"
             r"|watchdog: BUG: soft lockup.*|kernel BUG at .*)(?: \[#\d+\].*)?$")
_RIP = re.compile(_STAMP + r"RIP: [0-9a-f]{4}:(?P<func>[\w.]+)\+0x[0-9a-f]+/0x[0-9a-f]+")
_CPU = re.compile(_STAMP + r"CPU: (?P<cpu>\d+) ")
_CONTEXT_LINES = 12  # an oops prints CPU and RIP within a few lines of its headline


@dataclass(frozen=True)
class KernelFault:
    headline: str  # "Oops: int3: 0000", "Kernel panic - not syncing: Fatal exception in interrupt"
    function: str | None  # the RIP's function, when the kernel printed one
    cpu: int | None
    seconds: float | None  # the kernel's timestamp of the headline

    def describe(self) -> str:
        text = self.headline
        if self.function:
            text += f" in {self.function}"
        if self.cpu is not None:
            text += f" (vCPU {self.cpu})"
        if self.seconds is not None:
            text += f" at {self.seconds:.1f} s"
        return text


def kernel_faults(console: str) -> list[KernelFault]:
    lines = console.splitlines()
    faults: list[KernelFault] = []
    for index, line in enumerate(lines):
        head = _HEADLINES.match(line.strip())
        if head is None:
            continue
        function: str | None = None
        cpu: int | None = None
        if not head.group("what").startswith("Kernel panic"):
            for follow in lines[index + 1:index + 1 + _CONTEXT_LINES]:
                follow = follow.strip()
                if _HEADLINES.match(follow):
                    break
                if cpu is None and (c := _CPU.match(follow)):
                    cpu = int(c.group("cpu"))
                if function is None and (r := _RIP.match(follow)):
                    function = r.group("func")
        stamp = head.group("time")
        faults.append(KernelFault(head.group("what").rstrip(), function, cpu,
                                  float(stamp) if stamp else None))
    return faults


def fault_summary(console: str) -> str | None:
    """One line naming every kernel fault on the console ("guest kernel Oops: int3: 0000 in
    sched_clock_cpu (vCPU 3) at 2.9 s; then Kernel panic - not syncing: …"), None when there is none."""
    faults = kernel_faults(console)
    if not faults:
        return None
    return "guest kernel " + "; then ".join(f.describe() for f in faults)
