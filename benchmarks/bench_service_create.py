"""CreateContainer round trip through the fake runtime, the real stub and the whole service.

Node: a 256-CPU, 8-NUMA-node sysfs tree written by scripts/gen_sysfs.py into a temp directory.
Each pass keeps `--shared` Burstable containers running, then admits Guaranteed containers
(2 CPUs each; their replies carry an update for every shared container) and releases them with
StopContainer + RemoveContainer, and creates Burstable containers. Every admission persists the
checkpoint (fsync), as in production. Prints median / p99 / max per kind.

    .venv/bin/python benchmarks/bench_service_create.py [--creates 600] [--shared 50]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "service"))
from svc_harness import container, create, make_settings, pod, running  # type: ignore[import-not-found]

from nri_pinner.nri.gen import api_pb2 as api

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit/ is in the checkout, not installed
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


async def bench(workdir: Path, creates: int, shared: int, profile_label: str) -> None:
    sysfs = generate_sysfs(workdir)
    settings = make_settings(workdir, sysfs=sysfs, cpu_manager={"reserved_cpus": "0,128"})
    timings: dict[str, list[float]] = {"guaranteed (2 CPUs)": [], "burstable": []}
    async with running(settings, PROFILES[profile_label]) as r:
        bpod = pod("bulk", "burstable")
        for i in range(shared):
            await r.conn.create_container(create(bpod, container(bpod, f"s{i}", 100)))
        gpod = pod("gold")
        for i in range(creates):
            if i % 2 == 0:
                c = container(gpod, f"g{i}", 2000, 2000)
                started = time.perf_counter()
                reply = await r.conn.create_container(create(gpod, c))
                timings["guaranteed (2 CPUs)"].append(time.perf_counter() - started)
                assert reply is not None and len(reply.update) == shared
                await r.conn.stop_container(api.StopContainerRequest(pod=gpod, container=c))
                await r.conn.state_change(api.REMOVE_CONTAINER, gpod, c)
            else:
                c = container(bpod, f"b{i}", 100)
                started = time.perf_counter()
                await r.conn.create_container(create(bpod, c))
                timings["burstable"].append(time.perf_counter() - started)
                await r.conn.state_change(api.REMOVE_CONTAINER, bpod, c)
        assert r.svc.stub.stats.fallbacks == 0
    print(f"service CreateContainer round trip, {SHAPE} (256 CPUs), runtime {profile_label}, "
          f"{shared} shared containers running, checkpoint in {workdir}")
    for name, values in timings.items():
        print(summary(name, values))
    print(summary("all", [v for values in timings.values() for v in values]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--creates", type=int, default=600)
    parser.add_argument("--shared", type=int, default=50)
    parser.add_argument("--profile", choices=sorted(PROFILES), default=CONTAINERD_1_7_24.label)
    args = parser.parse_args()
    if args.creates < 1 or args.shared < 0:
        parser.error("need --creates >= 1 and --shared >= 0")
    logging.disable(logging.WARNING)  # the stub's stdlib loggers
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    workdir = Path(tempfile.mkdtemp(prefix="bench-svc-", dir="/tmp"))
    try:
        asyncio.run(bench(workdir, args.creates, args.shared, args.profile))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
