"""What a container cgroup's cpuset.cpus write costs on this machine's real cpuset hierarchy.

Needs root and a cgroup-v1 cpuset hierarchy (or v2 with the cpuset controller) at --root. Builds
`--containers` container cgroups, each below a pod cgroup of its own below a private parent (the
kubelet's layout: pod cgroups keep every CPU), each with `--tasks` sleeping processes, then times
the writes a pool change makes: every container narrowed by one CPU, then widened again, through
`CpusetWriter` exactly as the service does (`known` = no read-back, descriptors kept open). On v1 it
runs twice: with the containers' cpuset.sched_load_balance left set (every write rebuilds the
scheduler domains) and cleared as the service does (`reconcile.cgroup_v1_skip_rebuilds`). Prints
the median / p90 per container write and per pass.

    .venv/bin/python benchmarks/bench_cgroup_write.py [--containers 100] [--tasks 2] [--rounds 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

from nri_pinner.edge.cgroups.cpuset_writer import CpusetWriter
from nri_pinner.engine.cpuset import CPUSet


def make(d: Path, v1: bool, cpus: str, mems: str) -> None:
    d.mkdir()
    if v1:
        (d / "cpuset.cpus").write_text(cpus)
        (d / "cpuset.mems").write_text(mems)


def timed_passes(writer: CpusetWriter, rel: list[str], online: CPUSet, rounds: int) -> tuple[list[float], list[float]]:
    narrow = online - CPUSet([max(online)])
    per_write: list[float] = []
    per_pass: list[float] = []
    current = online
    for _ in range(rounds):
        for target in (narrow, online):
            started = time.perf_counter()
            for path in rel:
                t0 = time.perf_counter()
                writer.apply(path, target, (), known=(current, ()))
                per_write.append(time.perf_counter() - t0)
            per_pass.append(time.perf_counter() - started)
            current = target
    return per_write, per_pass


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
        make(parent, v1, str(online), mems)
        if not v1:
            (parent / "cgroup.subtree_control").write_text("+cpuset")
        for i in range(args.containers):
            pod = parent / f"pod{i}"
            make(pod, v1, str(online), mems)
            if not v1:
                (pod / "cgroup.subtree_control").write_text("+cpuset")
            d = pod / "ctr"
            make(d, v1, str(online), mems)
            dirs.append(d)
            for _ in range(args.tasks):
                p = subprocess.Popen(["sleep", "600"])
                sleepers.append(p)
                (d / "cgroup.procs").write_text(str(p.pid))
        rel = [f"/{parent.name}/{d.parent.name}/{d.name}" for d in dirs]
        print(f"cgroup {'v1' if v1 else 'v2'} at {root}, {len(online)} CPUs, {args.containers} containers x "
              f"{args.tasks} tasks below pod cgroups, {args.rounds} rounds of narrow+widen")
        for skip in (False, True) if v1 else (True,):
            writer = CpusetWriter(root, skip_v1_rebuilds=skip)
            per_write, per_pass = timed_passes(writer, rel, online, args.rounds)
            writer.close()
            assert CPUSet.parse((dirs[0] / "cpuset.cpus").read_text()) == online
            us = sorted(x * 1e6 for x in per_write)
            ms = sorted(x * 1e3 for x in per_pass)
            flag = (dirs[0] / "cpuset.sched_load_balance").read_text().strip() if v1 else "n/a (v2)"
            print(f"  containers' cpuset.sched_load_balance={flag}")
            print(f"    one container's cpuset.cpus write: median {statistics.median(us):7.1f} us   "
                  f"p90 {us[int(0.9 * (len(us) - 1))]:7.1f} us   max {us[-1]:7.1f} us")
            print(f"    a pool change over all containers: median {statistics.median(ms):7.2f} ms   "
                  f"p90 {ms[int(0.9 * (len(ms) - 1))]:7.2f} ms")
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
        for d in reversed(dirs):
            d.rmdir()
            d.parent.rmdir()
        if parent.exists():
            parent.rmdir()


if __name__ == "__main__":
    main()
