"""Round-trip latency of one CreateContainer through the NRI stub and the in-process fake runtime.

Measures runtime -> mux/ttrpc -> stub dispatch -> handler thread -> reply, both ends in this process
on one event loop (the handler runs on the stub's handler thread). Prints median / p99 / max.

    .venv/bin/python benchmarks/bench_stub_roundtrip.py [--calls 2000] [--profile nri-v0.12.0]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub import Stub

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testkit/ is in the checkout, not installed
from testkit.fake_runtime import (
    CONTAINERD_1_7_24,
    CONTAINERD_2_1_9,
    CONTAINERD_2_3_0,
    FakeRuntime,
    running_stub,
)

PROFILES = {p.label: p for p in (CONTAINERD_1_7_24, CONTAINERD_2_1_9, CONTAINERD_2_3_0)}


class Pinner:
    """Answers every CreateContainer with a cpuset adjustment, like the real plugin would."""

    def create_container(self, req: api.CreateContainerRequest) -> api.CreateContainerResponse:
        response = api.CreateContainerResponse()
        response.adjust.linux.resources.cpu.cpus = "2-3"
        response.adjust.linux.resources.cpu.mems = "0"
        return response


class AsyncPinner:
    async def create_container(self, req: api.CreateContainerRequest) -> api.CreateContainerResponse:
        return Pinner().create_container(req)


def request() -> api.CreateContainerRequest:
    """A CreateContainer of realistic size (labels, annotations, env, mounts, resources)."""
    req = api.CreateContainerRequest()
    req.pod.id, req.pod.name, req.pod.namespace, req.pod.uid = "a" * 64, "web-0", "default", "u" * 36
    req.pod.linux.cgroup_parent = "/kubepods/pod" + "u" * 36
    for i in range(8):
        req.pod.labels[f"label{i}"] = f"value{i}"
        req.pod.annotations[f"io.kubernetes.cri.annotation{i}"] = "x" * 40
    req.container.id, req.container.name = "c" * 64, "nginx"
    req.container.env.extend(f"VAR{i}=value{i}" for i in range(20))
    for i in range(6):
        req.container.mounts.add(destination=f"/mnt/{i}", type="bind", source=f"/var/lib/{i}", options=["rbind"])
    req.container.linux.resources.cpu.shares.value = 2048
    req.container.linux.resources.cpu.quota.value = 200000
    req.container.linux.resources.cpu.period.value = 100000
    req.container.linux.resources.memory.limit.value = 1 << 30
    return req


async def measure(plugin: object, calls: int, profile_label: str) -> list[float]:
    directory = tempfile.mkdtemp(prefix="nribench-", dir="/tmp")
    path = os.path.join(directory, "nri.sock")
    try:
        async with FakeRuntime(PROFILES[profile_label]) as runtime:
            await runtime.listen(path)
            async with running_stub(Stub(plugin, name="bench", idx="50", socket_path=path, env={})):
                conn = await runtime.wait_ready()
                req = request()
                for _ in range(min(200, calls)):  # warm-up
                    await conn.create_container(req)
                samples = []
                for _ in range(calls):
                    start = time.perf_counter_ns()
                    await conn.create_container(req)
                    samples.append((time.perf_counter_ns() - start) / 1e3)
                return samples
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def report(name: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(f"{name:<28} n={len(samples):5d}  median {statistics.median(samples):7.1f} us  "
          f"p99 {p99:7.1f} us  max {ordered[-1]:8.1f} us  mean {statistics.fmean(samples):7.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--profile", choices=sorted(PROFILES), default=CONTAINERD_2_3_0.label)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"CreateContainer round trip, fake runtime {args.profile}, request {request().ByteSize()} bytes")
    report("sync handler (thread)", asyncio.run(measure(Pinner(), args.calls, args.profile)))
    report("async handler (thread loop)", asyncio.run(measure(AsyncPinner(), args.calls, args.profile)))


if __name__ == "__main__":
    main()
