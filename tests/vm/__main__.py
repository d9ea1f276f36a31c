"""The VM tier by hand (root): ``python -m tests.vm run TOPOLOGY DRIVER [PART...]`` boots once and prints
each part's exit and log tail; ``python -m tests.vm shell [TOPOLOGY]`` gives an interactive root shell on
the serial console (no job; Ctrl-a x quits); ``python -m tests.vm soak …`` counts kernel faults over many
boots (tests/vm/soak.py)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence

from . import soak
from .guest import (
    DRIVERS,
    REPO,
    RUNS_DIR,
    TOPOLOGIES,
    VMError,
    boot,
    boot_lock,
    build_image,
    make_overlay,
    qemu_command,
)
from .prepare_deb import prepare as prepare_deb
from .prepare_deb import prepare_cri_stubs


def shell(topology: str) -> int:
    """An interactive guest on this terminal (serial console, root autologin, no job); Ctrl-a x quits."""
    shape = TOPOLOGIES[topology]
    with boot_lock():
        image, _ = build_image()
        RUNS_DIR.mkdir(parents=True, exist_ok=True)
        overlay = RUNS_DIR / f"shell-{os.getpid()}.qcow2"
        make_overlay(image, overlay)
        try:
            return subprocess.run(qemu_command(shape, image, overlay, "mon:stdio", None), check=False).returncode
        finally:
            overlay.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["soak"]:
        return soak.main(args_in[1:])
    parser = argparse.ArgumentParser(prog="python -m tests.vm", description=__doc__.splitlines()[0] if __doc__ else "")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="boot once, run parts, print each part's exit and log tail")
    run.add_argument("topology", choices=sorted(TOPOLOGIES))
    run.add_argument("driver", choices=DRIVERS)
    run.add_argument("parts", nargs="*", help="default: all of tests/vm/parts")
    run.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                     help="an environment variable for the parts (e.g. BENCH_START=1, PART_TIMEOUT=1800)")
    sh = sub.add_parser("shell", help="interactive root shell in the guest (Ctrl-a x quits)")
    sh.add_argument("topology", nargs="?", default="2s2c2t", choices=sorted(TOPOLOGIES))
    sub.add_parser("soak", help="boot many times and count kernel faults (python -m tests.vm soak --help)")
    args = parser.parse_args(args_in)
    if args.command == "shell":
        return shell(args.topology)
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--env {item!r}: KEY=VALUE")
        env[key] = value
    if not args.parts or "40-deb-unit" in args.parts:
        prepare_deb(REPO)  # the .deb part 40 installs (it stages the CRI proto too)
    elif {"30-plugin-scenarios", "60-bench-start-latency"} & set(args.parts):
        prepare_cri_stubs(REPO)  # their e2e harness needs the CRI proto
    result = boot(args.topology, args.driver, args.parts or None, env=env)
    boot_text = "never" if result.boot_seconds is None else f"{result.boot_seconds:.1f} s"
    print(f"image {result.image_seconds:.1f} s, boot {boot_text}, total {result.seconds:.1f} s, "
          f"timed out: {result.timed_out}; results in {result.out}")
    fault = result.kernel_fault()
    if fault:
        print(fault)
    failed = fault is not None
    for name in result.parts:
        try:
            part = result.part(name)
        except VMError as exc:
            print(exc)
            failed = True
            continue
        failed |= part.exit != 0
        print(f"--- {name}: exit {part.exit} in {result.part_seconds.get(name, float('nan')):.0f} s\n"
              f"{part.log[-2000:]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
