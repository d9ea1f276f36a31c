"""Sample statistics and the admission timing loop the benchmarks share."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Iterable

from nri_pinner.engine.admission_engine import AdmissionRequest, Engine
from nri_pinner.engine.cpumanager.state import EngineState


def p99(samples: Iterable[float]) -> float:
    """The 99th percentile by rank (the highest sample below 100 samples)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def p50_p99(samples: Iterable[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), p99(ordered)


def time_admissions(engine: Engine, state: EngineState, requests: list[AdmissionRequest],
                    control: list[float] | None = None) -> tuple[list[float], list[float], str]:
    """One `Engine.admit` per request on the same state: (wall ms, this thread's CPU ms, last outcome).

    Thread CPU time leaves out what other processes on a loaded machine take: the wall figure is
    what a runtime waits, the CPU figure is what the decision costs. With ``control``, each
    admission is followed by `control_work` (a fixed loop, `CONTROL_ROUNDS`), whose thread CPU ms are
    appended there: when the machine slows a sample down, the fixed loop beside it slows too."""
    wall: list[float] = []
    cpu: list[float] = []
    gc.collect()
    last = ""
    for req in requests:
        start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
        _, decision = engine.admit(state, req)
        cpu.append((time.thread_time_ns() - start_cpu) / 1e6)
        wall.append((time.perf_counter_ns() - start) / 1e6)
        last = "admitted" if decision.admitted else decision.reason
        if control is not None:
            start_cpu = time.thread_time_ns()
            control_work(CONTROL_ROUNDS)
            control.append((time.thread_time_ns() - start_cpu) / 1e6)
    return wall, cpu, last


CONTROL_ROUNDS = 12_000  # about 0.35 ms of CPython on this machine kind: an admission's length


def control_work(rounds: int) -> int:
    """Always the same work: integer arithmetic on a few locals, no allocation, no I/O."""
    total = 0
    for i in range(rounds):
        total += i * i
    return total
