"""Boot the VM tier's guest many times and count kernel faults: the evidence behind its TCG mode.

Each boot runs the tier's own image and QEMU arguments with ``systemd.unit=poweroff.target`` (the
kernel and systemd come up, then power off; no job, no parts) and is judged from its console:
``ok`` (powered down), ``fault`` (an oops, BUG or panic: tests/vm/console.py), ``timeout`` or
``other``. A pattern cycles the TCG thread modes so that each sees the same host load, e.g.
``single,single,multi``. Usage (root)::

    python -m tests.vm soak --boots 60 --pattern single,single,multi [--load scripts/vm/host-load.sh] [--until-fault]

``--load`` starts that command beside the boots (in its own process group, stopped at the end).
Results: one line a boot in build/vm/soak/<time>/boots.tsv, each console kept, a summary printed.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from .console import fault_summary
from .guest import (
    BUILD_DIR,
    KERNEL_ARGS,
    TCG_THREADS,
    TOPOLOGIES,
    boot_lock,
    build_image,
    make_overlay,
    qemu_command,
    start_qemu,
)

BOOT_LIMIT = 300.0
POWERED_DOWN = "reboot: Power down"


def judge(console: str, qemu_exit: int | None, timed_out: bool) -> tuple[str, str]:
    fault = fault_summary(console)
    if fault is not None:
        return "fault", fault
    if timed_out:
        return "timeout", f"no power-off within {BOOT_LIMIT:.0f} s"
    if POWERED_DOWN in console and qemu_exit == 0:
        return "ok", ""
    return "other", f"qemu exit {qemu_exit}, no '{POWERED_DOWN}' on the console"


def one_boot(topology: str, thread: str, image: Path, run_dir: Path, index: int) -> tuple[str, str, float]:
    overlay = run_dir / f"overlay-{index}.qcow2"
    console = run_dir / f"console-{index:03d}-{thread}.log"
    make_overlay(image, overlay)
    cmd = qemu_command(TOPOLOGIES[topology], image, overlay, f"file:{console}", None,
                       kernel_args=f"{KERNEL_ARGS} systemd.unit=poweroff.target", tcg_thread=thread)
    start = time.monotonic()
    proc = start_qemu(cmd, subprocess.DEVNULL)
    timed_out = False
    try:
        proc.wait(timeout=BOOT_LIMIT)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
    qemu_exit = proc.wait()
    seconds = time.monotonic() - start
    overlay.unlink(missing_ok=True)
    verdict, why = judge(console.read_text(errors="replace"), qemu_exit, timed_out)
    return verdict, why, seconds


def main(argv: Sequence[str] | None = None) -> int:
    summary = __doc__.splitlines()[0] if __doc__ else ""
    parser = argparse.ArgumentParser(prog="python -m tests.vm soak", description=summary)
    parser.add_argument("--boots", type=int, required=True)
    parser.add_argument("--pattern", default="single", help=f"comma-separated cycle of {', '.join(TCG_THREADS)}")
    parser.add_argument("--topology", default="2s2c2t", choices=sorted(TOPOLOGIES))
    parser.add_argument("--load", help="a command to run beside the boots (host load)")
    parser.add_argument("--until-fault", action="store_true", help="stop after the first boot that faults")
    args = parser.parse_args(argv)
    pattern = args.pattern.split(",")
    if any(p not in TCG_THREADS for p in pattern):
        parser.error(f"--pattern: each of {', '.join(TCG_THREADS)}")
    run_dir = BUILD_DIR / "soak" / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True)
    table = run_dir / "boots.tsv"
    table.write_text("index\tthread\tverdict\tseconds\tload1\twhy\n")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed soak still stops its load (finally)
    counts: dict[str, Counter[str]] = {t: Counter() for t in pattern}
    seconds: dict[str, list[float]] = {t: [] for t in pattern}
    load: subprocess.Popen[bytes] | None = None
    try:
        with boot_lock():  # the load starts only once no other boot (a VM test run) can be slowed by it
            image, _ = build_image()
            if args.load:
                load = subprocess.Popen(["bash", "-c", args.load], start_new_session=True,
                                        stdout=(run_dir / "load.log").open("w"), stderr=subprocess.STDOUT)
            for index in range(args.boots):
                thread = pattern[index % len(pattern)]
                verdict, why, secs = one_boot(args.topology, thread, image, run_dir, index)
                load1 = os.getloadavg()[0]
                counts[thread][verdict] += 1
                if verdict == "ok":
                    seconds[thread].append(secs)
                with table.open("a") as out:
                    out.write(f"{index}\t{thread}\t{verdict}\t{secs:.1f}\t{load1:.2f}\t{why}\n")
                print(f"boot {index + 1}/{args.boots} {thread}: {verdict} in {secs:.1f} s, load {load1:.2f}"
                      + (f" — {why}" if why else ""), flush=True)
                if args.until_fault and verdict == "fault":
                    break
    finally:
        if load is not None:
            os.killpg(load.pid, signal.SIGTERM)
            load.wait()
    print(f"results: {table}")
    for thread, counter in counts.items():
        times = seconds[thread]
        span = (f", ok boots {min(times):.1f}-{max(times):.1f} s (median {statistics.median(times):.1f})"
                if times else "")
        print(f"{thread}: {sum(counter.values())} boots, " + ", ".join(f"{k} {v}" for k, v in sorted(counter.items()))
              + span)
    return 0


if __name__ == "__main__":
    sys.exit(main())
