"""What telling systemd a pool change costs, beside the plain cgroup writes, under a real systemd.

Needs root, systemd as PID 1 and cgroup v2 (the VM tier runs it in its guest: tests/vm/parts/
50-bench-systemd-units). Starts `--scopes` transient scopes in one slice as runc's systemd driver
would (`AllowedCPUs` set at start), then times `--rounds` pool changes (every scope narrowed by one
CPU, then widened again), each pass two ways:
  * writes: `CpusetWriter.apply` per scope (the cgroupfs-driver pass);
  * systemd + writes: one `SystemdUnits.agree` batch for all scopes (SetUnitProperties, pipelined),
    then the same writes (the systemd-driver pass);
  * with --qos-slices, slice: the pool held on the scopes' slice instead (one call, one write a pass;
    `reconcile.systemd_pool_on_qos_slices`, docs/design/systemd-pool-design.md), the scopes keeping every CPU;
    each scope's `cpuset.cpus.effective` is checked against the slice after every pass.
Prints per pass: calls, wall time, this thread's CPU time, and PID 1's CPU time (systemd does work
of its own for every call: it writes the cgroup itself). Then checks that every scope's
`AllowedCPUs` equals its cgroup's `cpuset.cpus` (what makes a re-application a no-op).

    python benchmarks/bench_systemd_units.py [--scopes 100] [--rounds 10] [--qos-slices] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from nri_pinner.edge.cgroups.cpuset_writer import CpusetWriter
from nri_pinner.edge.cgroups.systemd_units import SystemdUnits
from nri_pinner.engine.cpuset import CPUSet

SLICE, PREFIX = "nribench.slice", "nribench"


def pid1_cpu_seconds() -> float:
    fields = Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def start_scopes(n: int, cpus: CPUSet) -> list[subprocess.Popen[bytes]]:
    """One at a time, each waited for: a hundred at once time out on systemd's bus under emulation."""
    procs = []
    for i in range(n):
        procs.append(subprocess.Popen(["systemd-run", "--quiet", "--scope", f"--unit={PREFIX}-{i}", f"--slice={SLICE}",
                                       "-p", f"AllowedCPUs={cpus}", "sleep", "infinity"]))
        path = Path(f"/sys/fs/cgroup/{SLICE}/{PREFIX}-{i}.scope/cpuset.cpus")
        deadline = time.monotonic() + 60
        while not path.exists() or not path.read_text().strip():
            if time.monotonic() > deadline or procs[-1].poll() is not None:
                raise SystemExit(f"scope {i} did not appear")
            time.sleep(0.02)
    return procs


def allowed_cpus(unit: str) -> CPUSet:
    out = subprocess.run(["systemctl", "show", "-P", "AllowedCPUs", unit], capture_output=True, text=True,
                         check=True).stdout.strip()
    return CPUSet.parse(out)


def effective(i: int) -> CPUSet:
    return CPUSet.parse(Path(f"/sys/fs/cgroup/{SLICE}/{PREFIX}-{i}.scope/cpuset.cpus.effective").read_text())


def run(scopes: int, rounds: int, qos_slices: bool = False) -> dict[str, Any]:
    online = CPUSet.parse(Path("/sys/devices/system/cpu/online").read_text())
    narrow = online - CPUSet([max(online)])
    procs = start_scopes(scopes, online)
    paths = [f"{SLICE}:{PREFIX}:{i}" for i in range(scopes)]
    results: dict[str, Any] = {"scopes": scopes, "rounds": rounds, "cpus": str(online)}
    try:
        for mode in ("writes", "systemd+writes", *(("slice",) if qos_slices else ())):
            writer = CpusetWriter("/sys/fs/cgroup", units=SystemdUnits(timeout=10.0) if mode != "writes" else None)
            wall, cpu, pid1, failed, outside = [], [], [], 0, 0
            current: CPUSet | None = online if mode != "slice" else None  # the slice: read at its first write
            for _ in range(rounds):
                for target in (narrow, online):
                    p0, t0, c0 = pid1_cpu_seconds(), time.perf_counter(), time.thread_time()
                    if mode == "slice":  # the pool held on the parent slice: one call, one write
                        failed += len(writer.tell_systemd([], slices=[(SLICE, target)]))
                        writer.apply_slice(f"/{SLICE}", target, current)
                    else:
                        failed += len(writer.tell_systemd([(p, target, ()) for p in paths]))
                        for p in paths:
                            writer.apply(p, target, (), known=(current, ()))
                    cpu.append(time.thread_time() - c0)
                    wall.append(time.perf_counter() - t0)
                    pid1.append(pid1_cpu_seconds() - p0)
                    current = target
                    if mode == "slice":  # each scope runs on its own set (every CPU) ∩ the slice's
                        outside += sum(1 for i in range(scopes) if effective(i) != target)
            writer.close()
            results[mode] = {
                "passes": len(wall), "calls_per_pass": {"writes": 0, "slice": 1}.get(mode, scopes),
                "failed_calls": failed, "wall_ms_median": statistics.median(wall) * 1e3,
                "cpu_ms_median": statistics.median(cpu) * 1e3, "pid1_cpu_ms_median": statistics.median(pid1) * 1e3,
                **({"scope_effective_not_the_slice": outside} if mode == "slice" else {}),
            }
        # the last pass of the systemd modes widened every scope (or the slice) back: systemd must hold that now
        disagree = [i for i in range(scopes) if allowed_cpus(f"{PREFIX}-{i}.scope") != online]
        results["scopes_disagreeing_with_systemd"] = len(disagree)
        if qos_slices:
            results["slice_disagreeing_with_systemd"] = int(allowed_cpus(SLICE) != online)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scopes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--qos-slices", action="store_true",
                        help="a third mode: the pool held on the scopes' slice (reconcile.systemd_pool_on_qos_slices)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = run(args.scopes, args.rounds, args.qos_slices)
    for mode in ("writes", "systemd+writes", *(("slice",) if args.qos_slices else ())):
        r = results[mode]
        print(f"{mode:15} {r['passes']} passes of {args.scopes} scopes: {r['calls_per_pass']} D-Bus calls/pass, "
              f"wall {r['wall_ms_median']:.1f} ms, our CPU {r['cpu_ms_median']:.1f} ms, "
              f"systemd CPU {r['pid1_cpu_ms_median']:.1f} ms (medians), failed calls {r['failed_calls']}")
    print(f"scopes whose AllowedCPUs differs from what was written: {results['scopes_disagreeing_with_systemd']}")
    if args.qos_slices:
        print(f"slice mode: scope effective sets not equal to the slice's, summed over passes: "
              f"{results['slice']['scope_effective_not_the_slice']}; slice's AllowedCPUs differs: "
              f"{results['slice_disagreeing_with_systemd']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
