"""NIC alignment costs: the NIC lookup per sandbox, and one admission decision with four hint providers.

1. **Lookup** (root only): ``--pods`` real network namespaces, each with a veth and a macvlan on this
   machine's NIC (as a macvlan CNI would make them); one ``NicLookup`` per run, a fresh sandbox per
   namespace. Printed: the lookup itself (thread: setns + netlink dump + parent-device and sysfs reads),
   the wall time a first create would wait for it (thread start included), and a cached read.
2. **Decision**: ``Engine.admit`` with four providers — CPUs, static device hints (a GPU), the NIC
   provider (the pod's NIC on a random node) and a second device-rule provider (an FPGA on another
   random node) — on 256 CPUs / 8 NUMA and 1024 CPUs / 16 NUMA, each Topology Manager policy,
   empty and half-used nodes. Targets as for the device/memory providers: p99 < 1 ms on 8 NUMA
   nodes, < 10 ms on 16. Exit status 1 if missed.

    .venv/bin/python benchmarks/bench_nics.py [--pods 20] [--repeat 200] [--seed 1] [--skip-lookup]
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import platform
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from pyroute2 import IPRoute, netns  # type: ignore[import-untyped]
from shapes import machine

from nri_pinner.config import from_mapping
from nri_pinner.edge.nic_lookup.lookup import NicLookup
from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.nicmanager.hints import NicHintProvider, NicTable, nic_hints
from nri_pinner.engine.topology.model import Topology
from nri_pinner.engine.topologymanager.hints import HintRequest, ResourceHints, TopologyHint, mask_of
from nri_pinner.nri.gen import api_pb2 as api

SIZES = (1, 4, 16)
POLICIES = ("best-effort", "restricted", "single-numa-node")


def stats(samples: list[float]) -> str:
    samples = sorted(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return f"median {statistics.median(samples):8.3f}  p99 {p99:8.3f}  max {samples[-1]:8.3f}"


# -- 1. lookup ------------------------------------------------------------------------------------


def _on_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """pyroute2 netlink on a thread of its own (as the service does)."""
    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(fn(*args)))
    t.start()
    t.join()
    return box[0] if box else None


def _host_nic() -> str | None:
    with IPRoute() as ip:
        for link in ip.get_links():
            if link.get("IFLA_PARENT_DEV_NAME") and link.get(("IFLA_LINKINFO", "IFLA_INFO_KIND")) is None:
                return str(link.get("ifname"))
    return None


def _make_pod_netns(name: str, lower: str | None) -> None:
    netns.create(name)
    with IPRoute() as ip:
        ip.link("add", ifname=f"{name}h", kind="veth", peer={"ifname": f"{name}p"})
        ip.link("set", index=ip.link_lookup(ifname=f"{name}p")[0], net_ns_fd=name)
        if lower is not None:
            ip.link("add", ifname=f"{name}m", kind="macvlan", link=ip.link_lookup(ifname=lower)[0],
                    macvlan_mode="bridge")
            ip.link("set", index=ip.link_lookup(ifname=f"{name}m")[0], net_ns_fd=name)


def _remove_pod_netns(name: str) -> None:
    with IPRoute() as ip:
        for index in ip.link_lookup(ifname=f"{name}h"):
            ip.link("del", index=index)
    netns.remove(name)


def bench_lookup(pods: int) -> None:
    if os.geteuid() != 0:
        print("NIC lookup: skipped (network namespaces need root)")
        return
    lower = _on_thread(_host_nic)
    names = [f"nbx{os.getpid() % 10000}n{i}" for i in range(pods)]
    made: list[str] = []
    try:
        for name in names:
            _on_thread(_make_pod_netns, name, lower)
            made.append(name)
        lookup = NicLookup("/", wait_seconds=10)
        inside, wall, cached, links = [], [], [], 0
        for i, name in enumerate(names):
            pod = api.PodSandbox(id=f"sb{i}", uid=f"uid{i}")
            pod.linux.namespaces.add(type="network", path=f"/var/run/netns/{name}")
            start = time.perf_counter()
            found = lookup.wait(pod)
            wall.append((time.perf_counter() - start) * 1000)
            assert found is not None and not found.problem, found
            inside.append(found.seconds * 1000)
            links = len(found.links)
            start = time.perf_counter()
            lookup.numa_nodes(f"uid{i}")
            cached.append((time.perf_counter() - start) * 1000)
        kinds = "veth" + (f" + macvlan on {lower}" if lower else "")
        print(f"NIC lookup per sandbox, {pods} namespaces x {links} links ({kinds}), ms:")
        print(f"  lookup thread (setns, netlink, sysfs)  {stats(inside)}")
        print(f"  first create's wait (thread start too) {stats(wall)}")
        print(f"  cached read (the NIC provider)         {stats(cached)}")
    finally:
        for name in made:
            _on_thread(_remove_pod_netns, name)


# -- 2. decision ----------------------------------------------------------------------------------


class DeviceRuleProvider:
    """A fourth provider: one device per pod on a known node, hinted by the kubelet device rule."""

    name = "fpga"

    def __init__(self, numa_nodes: Sequence[int], table: NicTable) -> None:
        self.numa_nodes, self.table = tuple(numa_nodes), table

    def hints(self, request: HintRequest) -> ResourceHints | None:
        nodes = self.table(request.pod_uid)
        hints = nic_hints(self.numa_nodes, nodes) if nodes else None
        return None if hints is None else {"vendor.com/fpga": hints}


def make_engine(topology: Topology, policy: str, nics: NicTable, fpgas: NicTable) -> Engine:
    settings = from_mapping({"cpu_manager": {"reserved_cpu_count": 2}, "topology_manager": {"policy": policy},
                             "hints": {"providers": ["cpu", "nics"]}})
    numa = topology.numa_nodes
    return Engine.from_settings(settings, topology, [NicHintProvider(numa, nics), DeviceRuleProvider(numa, fpgas)])


def request(rng: random.Random, pod: str, n: int, nodes: int, nics: NicTable, fpgas: NicTable) -> AdmissionRequest:
    nics.set(pod, [rng.randrange(nodes)])
    fpgas.set(pod, [rng.randrange(nodes)])
    gpu = {"vendor.com/gpu": (TopologyHint(mask_of([rng.randrange(nodes)]), True),)}
    return AdmissionRequest(pod, "c", "guaranteed", n * 1000, n * 1000, hints=gpu)


def half_used(engine: Engine, rng: random.Random, nics: NicTable, fpgas: NicTable) -> EngineState:
    state = engine.initial_state()
    nodes, target, i = len(engine.topology.numa_nodes), len(engine.topology.online) // 2, 0
    while len(state.exclusive_cpus()) < target and i < 10 * target:
        state, _ = engine.admit(state, request(rng, f"fill{i}", rng.randint(1, 8), nodes, nics, fpgas))
        i += 1
    return state


def bench_decisions(repeat: int, seed: int) -> bool:
    rng = random.Random(seed)
    print(f"\nEngine.admit with 4 providers (cpu, static gpu, nics, fpga), {repeat} samples per row; "
          f"Python {platform.python_version()} on {platform.machine()}")
    print(f"{'machine':15} {'policy':17} {'node':10} {'cpus':>4} {'median ms':>10} {'p99 ms':>8} {'target':>7}  "
          "last outcome")
    ok = True
    for label, topology, target in (("256cpu/8numa", machine(2, 4, 16, 2), 1.0),
                                    ("1024cpu/16numa", machine(2, 8, 32, 2), 10.0)):
        nodes = len(topology.numa_nodes)
        for policy in POLICIES:
            nics, fpgas = NicTable(), NicTable()
            engine = make_engine(topology, policy, nics, fpgas)
            for node_label, state in (("empty", engine.initial_state()),
                                      ("half-used", half_used(engine, rng, nics, fpgas))):
                for n in SIZES:
                    samples, last = [], ""
                    gc.collect()
                    for i in range(repeat):
                        req = request(rng, f"bench{i}", n, nodes, nics, fpgas)
                        start = time.perf_counter_ns()
                        _, decision = engine.admit(state, req)
                        samples.append((time.perf_counter_ns() - start) / 1e6)
                        last = "admitted" if decision.admitted else decision.reason
                    samples.sort()
                    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
                    met = p99 < target
                    ok &= met
                    print(f"{label:15} {policy:17} {node_label:10} {n:>4} {statistics.median(samples):>10.3f} "
                          f"{p99:>8.3f} {'<' + format(target, 'g'):>7}  {last}{'' if met else '  MISSED'}")
    print("all targets met" if ok else "TARGET MISSED (p99 < 1 ms on 8 NUMA nodes, < 10 ms on 16)")
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=20, help="namespaces for the lookup part (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=200, help="samples per decision row (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-lookup", action="store_true", help="only the decision part (no root needed)")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))  # no per-pod lines
    if not args.skip_lookup:
        bench_lookup(args.pods)
    sys.exit(0 if bench_decisions(args.repeat, args.seed) else 1)
