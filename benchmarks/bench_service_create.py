"""Service round trips through the fake runtime, the real stub and the whole service.

Node: a 256-CPU, 8-NUMA-node sysfs tree written by scripts/gen_sysfs.py into a temp directory.

CreateContainer (`--shared N`, repeatable): N Burstable containers run, each with a cgroup-v1
cpuset directory in a tree built in tmpfs (plain files: this measures our side of a direct write,
not the kernel's — benchmarks/bench_cgroup_write.py measures that). Then Guaranteed containers
(2 CPUs each) are created, started (StartContainer waits until every shared container's cgroup has
been rewritten by the syncer thread) and released with StopContainer + RemoveContainer,
alternating with Burstable creates. The checkpoint is written
behind the replies (fsync), as in production. Prints median / p99 / max per kind.

Synchronize (`--sync N`, repeatable): a runtime reporting N containers (100 Guaranteed with 2 CPUs,
the rest Burstable) connects; prints the time from accept to the synchronized answer, and the
process RSS after it (fake runtime and service share the process: an upper bound for the service).

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

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit/ is in the checkout, not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "service"))
from svc_harness import container, create, make_settings, pod, running  # type: ignore[import-not-found]

from nri_pinner.nri.gen import api_pb2 as api
from testkit.fake_runtime import CONTAINERD_1_7_24, CONTAINERD_2_3_0, NRI_V0_12_1

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


def make_cgroup(root: Path, c: api.Container, cpus: str) -> None:
    d = root / "cpuset" / c.linux.cgroups_path.strip("/")
    d.mkdir(parents=True)
    (d / "cpuset.cpus").write_text(cpus + "\n")
    (d / "cpuset.mems").write_text("0-7\n")


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


async def bench_sync(workdir: Path, sysfs: Path, total: int, profile_label: str) -> None:
    workdir.mkdir()
    settings = make_settings(workdir, sysfs=sysfs, cpu_manager={"reserved_cpus": "0,128"})
    pods, ctrs = [], []
    gpod, bpod = pod("gold"), pod("bulk", "burstable")
    pods = [gpod, bpod]
    guaranteed = min(100, total)
    for i in range(total):
        ctrs.append(container(gpod, f"g{i}", 2000, 2000) if i < guaranteed else container(bpod, f"b{i}", 100))
    started = time.perf_counter()
    async with running(settings, PROFILES[profile_label], pods=pods, containers=ctrs) as r:
        elapsed = time.perf_counter() - started
        assert len(r.svc.tracker.containers) == total
        rss = rss_mib()
    print(f"Synchronize of {total} containers ({guaranteed} Guaranteed), runtime {profile_label}: "
          f"connect to synchronized {elapsed * 1000:7.1f} ms; process RSS after it {rss:6.1f} MiB")


async def bench(workdir: Path, args: argparse.Namespace) -> None:
    sysfs = generate_sysfs(workdir)
    for n, shared in enumerate(args.shared):
        await bench_create(workdir / f"create-{n}", sysfs, args.creates, shared, args.profile, args.cgroups == "tree")
    for n, total in enumerate(args.sync):
        await bench_sync(workdir / f"sync-{n}", sysfs, total, args.profile)


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
