"""Service round trips through the fake runtime, the real stub and the whole service.

Node: a 256-CPU, 8-NUMA-node sysfs tree written by scripts/gen_sysfs.py into a temp directory.

CreateContainer (`--shared N`, repeatable): N Burstable containers run, each with a cgroup-v1
cpuset directory in a tree built in tmpfs (plain files: this measures our side of a direct write,
not the kernel's — benchmarks/bench_cgroup_write.py measures that). Then Guaranteed containers
(2 CPUs each) are created, started (StartContainer's reply waits until every shared container's cgroup
has been rewritten by a pass) and released with StopContainer + RemoveContainer,
alternating with Burstable creates. The checkpoint is written
behind the replies (fsync), as in production. Prints median / p99 / max per kind.

Synchronize (`--sync N`, repeatable): a runtime reporting N running containers (100 Guaranteed with
2 CPUs, the rest Burstable; with `--cgroups tree` each has a cgroup holding its current cpuset, as a
restarted service finds them) connects; prints the Synchronize round trip as the runtime sees it
(send to reply), the handler's wall and thread CPU time, the time from building the service to
synchronized, and the process RSS after it (fake runtime and service share the process: an upper
bound for the service).

    .venv/bin/python benchmarks/bench_service_create.py [--creates 600] [--shared 50 --shared 1000]
        [--sync 1000 --sync 3000] [--cgroups tree|none]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit/ is in the checkout, not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "service"))
from svc_harness import (  # type: ignore[import-not-found]
    container,
    create,
    make_settings,
    mems_for,
    new_service,
    pod,
    running,
)

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_3_0, NRI_V0_12_1, PluginConnection

REPO = Path(__file__).resolve().parents[1]
SHAPE = "dual-socket-8numa-256"
PROFILES = {p.label: p for p in (CONTAINERD_1_7_24, CONTAINERD_2_3_0, NRI_V0_12_1)}


def generate_sysfs(out: Path) -> Path:
    subprocess.run([sys.executable, str(REPO / "scripts" / "gen_sysfs.py"), "--out", str(out), "--shape", SHAPE],
                   check=True, stdout=subprocess.DEVNULL)
    return out / SHAPE


def summary(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return (f"{name:<22} n={len(ms):<5} median {statistics.median(ms):7.3f} ms   p99 {p99:7.3f} ms   "
            f"max {ms[-1]:7.3f} ms")


def make_cgroup(root: Path, c: api.Container, cpus: str, mems: str = "0-7") -> None:
    d = root / "cpuset" / c.linux.cgroups_path.strip("/")
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text(cpus + "\n")
    (d / "cpuset.mems").write_text(mems + "\n")


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def bench_create(workdir: Path, sysfs: Path, creates: int, shared: int, profile_label: str,
                       tree: bool) -> None:
    workdir.mkdir()
    settings = make_settings(workdir, sysfs=sysfs, cpu_manager={"reserved_cpus": "0,128"})
    cgroups = Path(settings.reconcile.cgroup_root)
    timings: dict[str, list[float]] = {"guaranteed create": [], "guaranteed start": [], "guaranteed stop": [],
                                       "burstable create": []}
    async with running(settings, PROFILES[profile_label]) as r:
        bpod = pod("bulk", "burstable")
        for i in range(shared):
            c = container(bpod, f"s{i}", 100)
            reply = await r.conn.create_container(create(bpod, c))
            if tree:
                assert reply is not None
                make_cgroup(cgroups, c, reply.adjust.linux.resources.cpu.cpus)
                await r.conn.state_change(api.START_CONTAINER, bpod, c)
        gpod = pod("gold")
        for i in range(creates):
            if i % 2 == 0:
                c = container(gpod, f"g{i}", 2000, 2000)
                started = time.perf_counter()
                reply = await r.conn.create_container(create(gpod, c))
                timings["guaranteed create"].append(time.perf_counter() - started)
                assert reply is not None and len(reply.update) == (0 if tree else shared)
                if tree:
                    make_cgroup(cgroups, c, reply.adjust.linux.resources.cpu.cpus)
                started = time.perf_counter()
                await r.conn.state_change(api.START_CONTAINER, gpod, c)  # waits for the shared cgroups
                timings["guaranteed start"].append(time.perf_counter() - started)
                started = time.perf_counter()
                await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=c))
                timings["guaranteed stop"].append(time.perf_counter() - started)
                await r.conn.state_change(api.REMOVE_CONTAINER, gpod, c)
            else:
                c = container(bpod, f"b{i}", 100)
                started = time.perf_counter()
                await r.conn.create_container(create(bpod, c))
                timings["burstable create"].append(time.perf_counter() - started)
                await r.conn.state_change(api.REMOVE_CONTAINER, bpod, c)
        fallbacks = r.svc.stub.stats.fallbacks
        writer = r.svc.plugin.writer
        written = writer.counts if writer is not None else None
        cp = r.svc.plugin.checkpoints
    print(f"CreateContainer round trip, {SHAPE} (256 CPUs), runtime {profile_label}, {shared} shared containers "
          f"running, cgroups: {'tree in tmp' if tree else 'none (NRI updates)'}; cgroup files written {written}, "
          f"checkpoints written {cp.written}, skipped {cp.skipped}, handler fallbacks {fallbacks}")
    for name, values in timings.items():
        print("  " + summary(name, values))


async def bench_sync(workdir: Path, sysfs: Path, total: int, profile_label: str, tree: bool) -> None:
    workdir.mkdir()
    settings = make_settings(workdir, sysfs=sysfs, cpu_manager={"reserved_cpus": "0,128"})
    cgroups = Path(settings.reconcile.cgroup_root)
    gpod, bpod = pod("gold"), pod("bulk", "burstable")
    pods = [gpod, bpod]
    guaranteed = min(100, total)
    # The runtime reports the cpusets of the containers' creates; the cgroups hold the current ones
    # (a Guaranteed container's own 2 CPUs, the shared pool for the rest), as a restarted service finds them.
    pinned = [f"{i + 1},{i + 129}" for i in range(guaranteed)]
    pool = str(CPUSet.parse("0-255") - CPUSet.parse(",".join(pinned))) if pinned else "0-255"
    svc = new_service(settings)
    topology = svc.plugin.node.engine.topology
    ctrs = []
    for i in range(total):
        c = (container(gpod, f"g{i}", 2000, 2000, cpus=pinned[i]) if i < guaranteed
             else container(bpod, f"b{i}", 100, cpus="0-255"))
        if tree:
            cpus = pinned[i] if i < guaranteed else pool
            make_cgroup(cgroups, c, cpus, mems_for(topology, CPUSet.parse(cpus)))
        ctrs.append(c)
    handler = svc.plugin.synchronize
    took: dict[str, float] = {}

    def timed(*args: Any) -> Any:  # the handler's own wall and thread CPU time (to its reply, or its parking)
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return handler(*args)
        finally:
            took["handler"], took["cpu"] = time.perf_counter() - wall, time.thread_time() - cpu

    svc.plugin.synchronize = timed
    call = PluginConnection.call

    async def timed_call(conn: PluginConnection, method: str, *args: Any) -> Any:  # as the runtime sees it
        wall = time.perf_counter()
        try:
            return await call(conn, method, *args)
        finally:
            if method == "Synchronize":
                took["round trip"] = took.get("round trip", 0.0) + time.perf_counter() - wall

    PluginConnection.call = timed_call  # type: ignore[method-assign,assignment]
    try:
        started = time.perf_counter()
        async with running(settings, PROFILES[profile_label], svc=svc, pods=pods, containers=ctrs) as r:
            elapsed = time.perf_counter() - started
            assert len(r.svc.plugin.node.containers) == total
            updates = len(r.conn.sync_updates)
            rss = rss_mib()
    finally:
        PluginConnection.call = call  # type: ignore[method-assign]
    print(f"Synchronize of {total} containers ({guaranteed} Guaranteed), runtime {profile_label}, cgroups: "
          f"{'tree in tmp' if tree else 'none (every write fails: NRI updates)'}:\n"
          f"  round trip (runtime's view) {took['round trip'] * 1000:7.1f} ms; handler wall "
          f"{took['handler'] * 1000:7.1f} ms, handler thread CPU {took['cpu'] * 1000:7.1f} ms; "
          f"updates in the reply {updates}\n"
          f"  connect + synchronize {elapsed * 1000:7.1f} ms; process RSS after it {rss:6.1f} MiB "
          f"(fake runtime included)")
async def bench(workdir: Path, args: argparse.Namespace) -> None:
    sysfs = generate_sysfs(workdir)
    for n, shared in enumerate(args.shared):
        await bench_create(workdir / f"create-{n}", sysfs, args.creates, shared, args.profile, args.cgroups == "tree")
    for n, total in enumerate(args.sync):
        await bench_sync(workdir / f"sync-{n}", sysfs, total, args.profile, args.cgroups == "tree")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=600)
    parser.add_argument("--shared", type=int, action="append")
    parser.add_argument("--sync", type=int, action="append", default=[])
    parser.add_argument("--cgroups", choices=["tree", "none"], default="tree")
    parser.add_argument("--profile", choices=sorted(PROFILES), default=CONTAINERD_1_7_24.label)
    args = parser.parse_args()
    args.shared = args.shared if args.shared is not None else ([] if args.sync else [50])
    if args.creates < 1 or any(n < 0 for n in args.shared + args.sync):
        parser.error("need --creates >= 1 and --shared, --sync >= 0")
    sys.setswitchinterval(0.0005)  # as `nri-pinner run` sets it
    logging.disable(logging.WARNING)  # the stub's stdlib loggers
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    # tmpfs when there is one: an ext4 O_TRUNC write is journaled (~1 ms), a cgroup file write is not
    workdir = Path(tempfile.mkdtemp(prefix="bench-svc-", dir="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp"))
    try:
        asyncio.run(bench(workdir, args))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
