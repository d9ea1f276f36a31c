"""The core reads no clock and calls no metrics object (issue 46): time comes in on events (the edge
stamps them), the edge times the core's decisions around `NodeCore.handle` (`Timed`), counters leave as
`Count` effects and the pool gauges are read from the published view. Checked from the core's source."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path
from typing import get_args

from core_harness import make_core, resize
from prometheus_client import Counter

from nri_pinner.core.effects import CounterName
from nri_pinner.edge.observe.metrics import Metrics
from testkit.pod_builders import container, pod

CORE = Path(__file__).resolve().parents[2] / "nri_pinner" / "core"

CLOCK_MODULES = {"time", "datetime"}
METRICS_MODULES = {"prometheus_client"}
# clock reads by name, however imported (`from time import monotonic`, `time.perf_counter()`)
CLOCK_NAMES = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "process_time",
               "process_time_ns", "thread_time", "thread_time_ns", "clock_gettime", "clock_gettime_ns", "now",
               "utcnow", "today"}


def violations(path: Path) -> list[str]:
    """What in ``path`` reads a clock or reaches a metrics object: imports of time/datetime or
    prometheus_client (also for types), calls of ``time.*``/``datetime.*`` or of a clock by its name,
    and any ``.metrics`` attribute or ``metrics`` name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in CLOCK_MODULES | METRICS_MODULES:
                    found.append(f"{where} imports {a.name}")
        elif isinstance(node, ast.ImportFrom) and not node.level:
            if (node.module or "").split(".")[0] in CLOCK_MODULES | METRICS_MODULES:
                found.append(f"{where} imports from {node.module}")
        elif isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            last = called.rpartition(".")[2]
            if called.split(".")[0] in CLOCK_MODULES or last in CLOCK_NAMES:
                found.append(f"{where} calls {called}")
        elif isinstance(node, ast.Attribute) and node.attr == "metrics":
            found.append(f"{where} reaches {ast.unparse(node)}")
        elif (node.id if isinstance(node, ast.Name) else node.arg if isinstance(node, ast.arg) else "") == "metrics":
            found.append(f"{where} names metrics")
    return found


def test_the_core_reads_no_clock_and_calls_no_metrics_object() -> None:
    paths = sorted(CORE.glob("*.py"))
    assert {p.stem for p in paths} >= {"node", "lifecycle", "resizing", "passes", "rebuild", "connection"}
    found = [v for p in paths for v in violations(p)]
    assert not found, "\n".join(found)


def test_the_check_sees_each_kind_of_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom datetime import datetime\nfrom time import monotonic\n"
                   "import prometheus_client\n"
                   "def f(core, metrics):\n    time.perf_counter()\n    datetime.now()\n    monotonic()\n"
                   "    core.metrics.resizes.labels('x').inc()\n")
    found = "\n".join(violations(bad))
    for needle in ("imports time", "imports from datetime", "imports from time", "imports prometheus_client",
                   "calls time.perf_counter", "calls datetime.now", "calls monotonic", "reaches core.metrics",
                   "names metrics"):
        assert needle in found, (needle, found)


def test_every_counter_the_core_counts_is_a_metric() -> None:
    """A `Count` names a counter of the edge's metrics (``rejected``: its method counting two)."""
    metrics = Metrics()
    for name in get_args(CounterName):
        if name == "rejected":
            metrics.count("rejected", ("InsufficientCPUs",))
            assert metrics.registry.get_sample_value("nri_pinner_pinning_errors_total",
                                                     {"reason": "InsufficientCPUs"}) == 1
            continue
        assert isinstance(getattr(metrics, name), Counter), name


def test_a_resize_is_shown_at_the_time_its_event_carries() -> None:
    """Status's resize "at" is the event's (the edge stamps it); an unstamped event leaves it out."""
    e = make_core()
    sb = pod("g", "guaranteed")
    c = container(sb, "app", 2000, 2000)
    e.run(sb, c)
    e.handle(replace(resize(sb, c, 3000), at=1234.5))
    e.settle()
    assert e.assignments()[c.id]["resize"]["at"] == 1234.5
    e.core.handle(resize(sb, c, 2000))  # straight to the core: not stamped
    assert "at" not in e.assignments()[c.id]["resize"]
