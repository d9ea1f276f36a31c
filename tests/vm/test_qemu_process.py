"""QEMU dies with the process that started it (tests/vm/guest.py start_qemu). Runs without QEMU: a
`sleep` stands in for it, started exactly as QEMU is; the starter is killed with SIGKILL, as a killed
`python -m tests.vm run` would be, which leaves it no chance to clean up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STARTER = ("import subprocess, time\n"
           "from tests.vm.guest import start_qemu\n"
           "print(start_qemu(['sleep', '120'], subprocess.DEVNULL).pid, flush=True)\n"
           "time.sleep(120)\n")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def test_the_guest_process_ends_when_its_starter_is_killed() -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert starter.stdout is not None
    child = int(starter.stdout.readline())
    try:
        assert alive(child)
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), "the stand-in outlived its starter"
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
