"""Time one admission with all four hint providers at once on 1024 CPUs / 16 NUMA nodes, under every
CPU Manager policy option and every Topology Manager policy.

``Engine.admit`` = CPU hints + device hints (a GPU the container holds, on a random node) + Memory
Manager hints (memory and 1 GiB of 2 MiB hugepages) + NIC hints (the pod's NIC on a random node, an
up-set of 2^15 masks) + merge + CPU and memory allocation. Machine: 2 sockets x 8 NUMA x 32 cores x 2
threads, 64 GiB + 4 GiB hugepages per node. Rows: each CPU Manager option alone (and none), each
Topology Manager policy (none, best-effort, restricted, single-numa-node; prefer-closest-numa-nodes
with best-effort and restricted), empty and half-used nodes, 2 / 16 / 130 / 400 CPUs (the large
ones span several nodes, memory growing with them).

Target: p99 < 1 ms on every row, judged on this thread's CPU time (the wall-clock p99 is printed
beside it and flagged when over: on a shared machine it measures other processes' turns); the load
average is printed before and after, since the target is meant for a machine at 1-minute load < 1.
Exit status 1 if a row misses.

`ctl p99`: each admission is followed by a fixed pure-Python loop of about the same length
(`timing.control_work`); its p99 is the machine's. On a virtual machine a vCPU can be slowed for a
millisecond with nothing in the guest to show for it (no page fault, no context switch, no system
time): when a row misses and its control p99 is over the target too, the machine did it, and the last
line counts the control samples that took over twice the control's median.

    .venv/bin/python benchmarks/bench_four_providers.py [--repeat N (1000)] [--seed S] [--option NAME]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys

from shapes import machine
from timing import p99, time_admissions

from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.devicemanager.hints import Device
from nri_pinner.engine.memorymanager.provider import build_policy
from nri_pinner.engine.nicmanager.hints import NicHintProvider, NicTable
from nri_pinner.engine.topology.model import Topology

GB = 1 << 30
TARGET_MS = 1.0
SIZES = (2, 16, 130, 400)
OPTIONS = ("", "full-pcpus-only", "distribute-cpus-across-numa", "align-by-socket", "distribute-cpus-across-cores",
           "strict-cpu-reservation", "prefer-align-cpus-by-uncorecache")
POLICIES = ("none", "best-effort", "restricted", "single-numa-node", "best-effort+closest", "restricted+closest")


def make_engine(topology: Topology, option: str, policy: str, nics: NicTable) -> Engine:
    nodes = topology.numa_nodes
    memory = build_policy(nodes, {n: 68 * GB for n in nodes}, {n: {"hugepages-2Mi": 4 * GB} for n in nodes},
                          {n: {"memory": GB} for n in nodes})
    tm_policy, _, closest = policy.partition("+")
    settings = from_mapping({
        "cpu_manager": {"reserved_cpu_count": 2, "policy_options": [option] if option else []},
        "topology_manager": {"policy": tm_policy,
                             "policy_options": ["prefer-closest-numa-nodes"] if closest else []},
        "hints": {"providers": ["cpu", "devices", "memory", "nics"]}})
    return Engine.from_settings(settings, topology, [NicHintProvider(nodes, nics)], memory=memory)


def request(rng: random.Random, pod: str, cpus: int, nodes: int, nics: NicTable) -> AdmissionRequest:
    gpu = rng.randrange(nodes)
    nics.set(pod, [rng.randrange(nodes)])
    memory_gb = max(4, cpus // 2)  # 400 CPUs (7 nodes' worth) with 200 GiB: memory spans nodes too
    return AdmissionRequest(pod, "c", "guaranteed", cpus * 1000, cpus * 1000,
                            devices={"nvidia": [Device(f"gpu{gpu}", frozenset({gpu}))]},
                            memory={"memory": memory_gb * GB, "hugepages-2Mi": GB})


def half_used(engine: Engine, rng: random.Random, nics: NicTable) -> EngineState:
    """~32 random containers of 16-32 CPUs with a GPU, a NIC and 1-8 GiB, until half the CPUs are taken."""
    state = engine.initial_state()
    nodes, target = len(engine.topology.numa_nodes), len(engine.topology.online) // 2
    i = 0
    while len(state.exclusive_cpus()) < target and i < 200:
        req = request(rng, f"fill{i}", rng.randint(16, 32), nodes, nics)
        state, _ = engine.admit(state, req)
        i += 1
    return state


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min)"


def run(repeat: int, seed: int, options: tuple[str, ...]) -> bool:
    topology = machine(2, 8, 32, 2)
    nodes = len(topology.numa_nodes)
    print(f"Engine.admit with cpu+devices+memory+nics, 1024cpu/16numa, {repeat} samples per row; "
          f"Python {platform.python_version()} on {platform.machine()}; {load()}")
    print(f"{'option':33} {'policy':20} {'node':10} {'cpus':>4} {'median ms':>10} {'p99 ms':>8} "
          f"{'cpu med':>8} {'cpu p99':>8} {'ctl p99':>8} {'target':>7}  last")
    ok, worst = True, (0.0, "")
    controls: list[float] = []
    machine_misses = 0
    for option in options:
        for policy in POLICIES:
            if option == "align-by-socket" and policy == "single-numa-node":
                continue  # the kubelet refuses this pair (PolicyOptionError)
            nics = NicTable()
            engine = make_engine(topology, option, policy, nics)
            rng = random.Random(f"{seed}/{option}/{policy}")  # a row's node does not depend on --option
            for state_label, state in (("empty", engine.initial_state()), ("half-used", half_used(engine, rng, nics))):
                for n in SIZES:
                    reqs = [request(rng, f"bench{i}", n, nodes, nics) for i in range(repeat)]
                    control: list[float] = []
                    wall, cpu, last = time_admissions(engine, state, reqs, control)
                    controls += control
                    cpu99, wall99, ctl99 = p99(cpu), p99(wall), p99(control)
                    met = cpu99 < TARGET_MS
                    ok &= met
                    machine_misses += not met and ctl99 >= TARGET_MS
                    row = f"{option or '(none)':33} {policy:20} {state_label:10} {n:>4}"
                    worst = max(worst, (cpu99, row))
                    print(f"{row} {statistics.median(wall):>10.3f} {wall99:>8.3f} {statistics.median(cpu):>8.3f} "
                          f"{cpu99:>8.3f} {ctl99:>8.3f} {'<' + format(TARGET_MS, 'g'):>7}  {last}"
                          f"{'' if met else '  MISSED'}{'' if met or ctl99 < TARGET_MS else ' (control too)'}"
                          f"{'' if wall99 < TARGET_MS else '  (wall over target)'}")
    control_median = statistics.median(controls)
    slowed = sum(c > 2 * control_median for c in controls)
    print(f"control loop: median {control_median:.3f} ms, {slowed} of {len(controls)} samples over twice that; "
          f"rows missed while their control p99 was over the target too: {machine_misses}")
    print(f"worst cpu p99 {worst[0]:.3f} ms: {worst[1].split()}; {load()}")
    print("all targets met" if ok else f"TARGET MISSED (p99 < {TARGET_MS:g} ms on 16 NUMA)")
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    # 1,000: p99 is then the 11th slowest sample, not the 2nd (one vCPU hiccup away; benchmarks/README.md)
    parser.add_argument("--repeat", type=int, default=1000, help="samples per row (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--option", action="append", choices=[o for o in OPTIONS if o],
                        help="only this CPU Manager option (repeatable; default: none and each option)")
    args = parser.parse_args()
    sys.exit(0 if run(args.repeat, args.seed, tuple(args.option) if args.option else OPTIONS) else 1)
