"""Time one full admission decision: ``Engine.admit`` = CPU hints + topology merge + static-policy allocation.

Cases: guaranteed creates of 1/4/16/64 CPUs on an empty node and on a half-used node
(filled through the engine itself with random containers, so the free set is fragmented)
for two machines, both with Topology Manager best-effort, container scope:

* 256 CPUs = 2 sockets x 4 NUMA x 16 cores x 2 threads, CPU hints only;
* 1024 CPUs = 2 sockets x 8 NUMA x 32 cores x 2 threads, three hint providers: CPUs plus
  GPU and NIC device hints on random NUMA nodes (a fresh random pair per sample).

Plus "merge-only" rows: a Burstable container (no CPU hint) with GPU and NIC device hints,
on both machines: the merge and the shared-pool decision with nothing to allocate; and
"distribute" rows: ``distribute-cpus-across-numa`` with 64-400 CPU requests on 16 NUMA nodes
(target judged on thread CPU time).

Target: p99 < 1 ms on both machines (issue 36: 1024 CPUs / 16 NUMA too, distribute rows included),
judged on "cpu p99", this thread's CPU time: on a busy shared machine the wall-clock p99 mostly
measures the neighbours (a wall p99 over target is flagged). The load average is printed before
and after: the target is meant for a 1-minute load below 1. Exit status 1 if missed.

    .venv/bin/python benchmarks/bench_admission.py [--repeat N] [--seed S]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
from typing import Any

from shapes import machine
from timing import p99, time_admissions

from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.cpumanager.state import EngineState
from nri_pinner.engine.topology.model import Topology
from nri_pinner.engine.topologymanager.hints import TopologyHint, mask_of

SIZES = (1, 4, 16, 64)
DISTRIBUTED_SIZES = (64, 130, 258, 400)  # odd group counts leave remainders to spread


def make_engine(topology: Topology, **cpu_manager: Any) -> Engine:
    settings = from_mapping({"cpu_manager": {"reserved_cpu_count": 2, **cpu_manager},
                             "topology_manager": {"policy": "best-effort"}})
    return Engine.from_settings(settings, topology)


def device_hints(rng: random.Random, numa_nodes: int) -> dict[str, tuple[TopologyHint, ...]]:
    """A GPU on one random node and a dual-port NIC on two: preferred per device, not across."""
    gpu = rng.randrange(numa_nodes)
    nic = rng.sample(range(numa_nodes), 2)
    return {
        "vendor.com/gpu": (TopologyHint(mask_of([gpu]), True),),
        "vendor.com/nic": (TopologyHint(mask_of([nic[0]]), True), TopologyHint(mask_of([nic[1]]), True),
                           TopologyHint(mask_of(nic), False)),
    }


def half_used(engine: Engine, rng: random.Random, with_devices: bool) -> EngineState:
    """Admit random 1-8 CPU containers until half of the CPUs are exclusive."""
    state = engine.initial_state()
    nodes = len(engine.topology.numa_nodes)
    target = len(engine.topology.online) // 2
    i = 0
    while len(state.exclusive_cpus()) < target:
        n = rng.randint(1, 8)
        hints = device_hints(rng, nodes) if with_devices else {}
        state, _ = engine.admit(state, AdmissionRequest(f"fill{i}", "c", "guaranteed", n * 1000, n * 1000,
                                                        hints=hints))
        i += 1
    return state


def measure(engine: Engine, state: EngineState, requests: list[AdmissionRequest]
            ) -> tuple[float, float, float, str]:
    """(median, p99, p99 of this thread's CPU time) in ms, and the last outcome."""
    wall, cpu, last = time_admissions(engine, state, requests)
    return statistics.median(wall), p99(wall), p99(cpu), last


def run(repeat: int, seed: int, distributed_repeat: int) -> bool:
    rng = random.Random(seed)
    cases = [("256cpu/8numa", machine(2, 4, 16, 2), False, 1.0),
             ("1024cpu/16numa", machine(2, 8, 32, 2), True, 1.0)]
    print(f"Engine.admit, TM best-effort, {repeat} samples per row; Python {platform.python_version()} "
          f"on {platform.machine()}; {load()}")
    print(f"{'machine':15} {'providers':11} {'node':10} {'cpus':>4} {'median ms':>10} {'p99 ms':>8} "
          f"{'cpu p99':>8} {'target':>7}  last outcome")
    ok = True
    for label, topology, with_devices, target_ms in cases:
        engine = make_engine(topology)
        nodes = len(topology.numa_nodes)
        providers = "cpu+gpu+nic" if with_devices else "cpu"
        states = {"empty": engine.initial_state(), "half-used": half_used(engine, rng, with_devices)}
        for state_label, state in states.items():
            for n in SIZES:
                requests = [AdmissionRequest("bench", "c", "guaranteed", n * 1000, n * 1000,
                                             hints=device_hints(rng, nodes) if with_devices else {})
                            for _ in range(repeat)]
                median, p99, cpu99, outcome = measure(engine, state, requests)
                met = cpu99 < target_ms
                ok &= met
                print(f"{label:15} {providers:11} {state_label:10} {n:>4} {median:>10.3f} {p99:>8.3f} "
                      f"{cpu99:>8.3f} {'<' + format(target_ms, 'g'):>7}  {outcome}{'' if met else '  MISSED'}"
                      f"{_wall(p99, target_ms)}")
            # merge-only: Burstable (no CPU hint), device hints only
            requests = [AdmissionRequest("bench", "c", "burstable", 500, 1000, hints=device_hints(rng, nodes))
                        for _ in range(repeat)]
            median, p99, cpu99, outcome = measure(engine, state, requests)
            met = cpu99 < target_ms
            ok &= met
            print(f"{label:15} {'gpu+nic':11} {state_label:10} {'burst':>5}{median:>10.3f} {p99:>8.3f} "
                  f"{cpu99:>8.3f} {'<' + format(target_ms, 'g'):>7}  merge-only {outcome}{'' if met else '  MISSED'}"
                  f"{_wall(p99, target_ms)}")
    ok &= run_distributed(rng, distributed_repeat)
    print(load())
    print("all targets met" if ok else "TARGET MISSED (p99 < 1 ms)")
    return ok


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min)"


def _wall(p99: float, target_ms: float) -> str:
    return "" if p99 < target_ms else "  (wall over target)"


def run_distributed(rng: random.Random, repeat: int) -> bool:
    """distribute-cpus-across-numa with large requests on 16 NUMA nodes (many NUMA combinations)."""
    ok = True
    topology = machine(2, 8, 32, 2)
    engine = make_engine(topology, policy_options=["distribute-cpus-across-numa"])
    states = {"empty": engine.initial_state(), "half-used": half_used(engine, rng, False)}
    for state_label, state in states.items():
        for n in DISTRIBUTED_SIZES:
            requests = [AdmissionRequest("bench", "c", "guaranteed", n * 1000, n * 1000) for _ in range(repeat)]
            median, p99, cpu99, outcome = measure(engine, state, requests)
            met = cpu99 < 1.0
            ok &= met
            print(f"{'1024cpu/16numa':15} {'distribute':11} {state_label:10} {n:>4} {median:>10.3f} {p99:>8.3f} "
                  f"{cpu99:>8.3f} {'<1':>7}  {outcome}{'' if met else '  MISSED'}{_wall(p99, 1.0)}")
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=500, help="samples per row (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat-distributed", type=int, default=300,
                        help="samples per distribute-cpus-across-numa row (default: %(default)s)")
    args = parser.parse_args()
    sys.exit(0 if run(args.repeat, args.seed, args.repeat_distributed) else 1)
