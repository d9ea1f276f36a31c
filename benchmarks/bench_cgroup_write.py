"""What a container cgroup's cpuset.cpus write costs on this machine's real cpuset hierarchy.

Needs root and a cgroup-v1 cpuset hierarchy (or v2 with the cpuset controller) at --root. Builds
`--containers` sibling cgroups below a private parent (the kubelet's pod-level layout: the parent
keeps every CPU), each with `--tasks` sleeping processes, then times the writes a pool change makes:
every container narrowed by one CPU, then widened again, through `CpusetWriter` exactly as the
service does (`known` = no read-back). Prints the median / p90 per container write and per pass,
and whether the kernel rebuilt scheduler domains (v1: the parent's cpuset.sched_load_balance).

    .venv/bin/python benchmarks/bench_cgroup_write.py [--containers 100] [--tasks 2] [--rounds 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.service.cgroup_writer import CpusetWriter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default="/sys/fs/cgroup")
    parser.add_argument("--containers", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    root = Path(args.root)
    v1 = (root / "cpuset").is_dir()
    base = root / "cpuset" if v1 else root
    online = CPUSet.parse((base / "cpuset.cpus.effective" if not v1 else base / "cpuset.cpus").read_text())
    if len(online) < 2:
        parser.error("needs at least 2 CPUs")
    parent = base / f"nri-pinner-bench-{os.getpid()}"
    mems = (base / ("cpuset.mems" if v1 else "cpuset.mems.effective")).read_text().strip()
    sleepers: list[subprocess.Popen[bytes]] = []
    dirs: list[Path] = []
    try:
        parent.mkdir()
        if v1:
            (parent / "cpuset.cpus").write_text(str(online))
            (parent / "cpuset.mems").write_text(mems)
        for i in range(args.containers):
            d = parent / f"c{i}"
            d.mkdir()
            dirs.append(d)
            (d / "cpuset.cpus").write_text(str(online))
            (d / "cpuset.mems").write_text(mems)
            for _ in range(args.tasks):
                p = subprocess.Popen(["sleep", "600"])
                sleepers.append(p)
                (d / "cgroup.procs").write_text(str(p.pid))
        writer = CpusetWriter(root)
        narrow = online - CPUSet([max(online)])
        rel = [f"/{parent.name}/{d.name}" for d in dirs]
        per_write: list[float] = []
        per_pass: list[float] = []
        current = online
        for _ in range(args.rounds):
            for target in (narrow, online):
                started = time.perf_counter()
                for path in rel:
                    t0 = time.perf_counter()
                    writer.apply(path, target, "", known=(current, ""))
                    per_write.append(time.perf_counter() - t0)
                per_pass.append(time.perf_counter() - started)
                current = target
        assert CPUSet.parse((dirs[0] / "cpuset.cpus").read_text()) == online
        us = sorted(x * 1e6 for x in per_write)
        ms = sorted(x * 1e3 for x in per_pass)
        balance = (parent / "cpuset.sched_load_balance").read_text().strip() if v1 else "n/a (v2)"
        print(f"cgroup {'v1' if v1 else 'v2'} at {root}, {len(online)} CPUs, {args.containers} containers x "
              f"{args.tasks} tasks, {args.rounds} rounds of narrow+widen; sched_load_balance={balance}")
        print(f"  one container's cpuset.cpus write: median {statistics.median(us):7.1f} us   "
              f"p90 {us[int(0.9 * (len(us) - 1))]:7.1f} us   max {us[-1]:7.1f} us")
        print(f"  a pool change over all containers: median {statistics.median(ms):7.2f} ms   "
              f"p90 {ms[int(0.9 * (len(ms) - 1))]:7.2f} ms")
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
        for d in reversed(dirs):
            d.rmdir()
        if parent.exists():
            parent.rmdir()


if __name__ == "__main__":
    main()
