"""The clock and the metrics the core does without (it reads no clock and calls no metrics object,
core/node.py), at the edge: `timed` stamps an event that carries a wall time and measures
`NodeCore.handle` over it; `carry_out` does what a `Count` or a `Timed` effect asks — a Prometheus
counter bumped, the measured seconds observed in a histogram or logged as ``decision_ms``."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from ...core import events as ev
from ...core.effects import Count, Timed

if TYPE_CHECKING:
    from ...core.node import NodeCore, Outcome
    from .metrics import Metrics

log = structlog.get_logger("nri_pinner.service")

OBSERVED = (Count, Timed)  # the effects `carry_out` takes


def timed(core: NodeCore, event: ev.Event) -> tuple[Outcome, float]:
    """The core's outcome for ``event`` and the seconds it took. An `UpdateContainer` is stamped with
    the wall time it reached the node thread (status: its resize's "at"), unless it carries one."""
    if isinstance(event, ev.UpdateContainer) and event.at is None:
        event = replace(event, at=time.time())
    started = time.perf_counter()
    outcome = core.handle(event)
    return outcome, time.perf_counter() - started


def carry_out(metrics: Metrics, effect: Count | Timed, seconds: float) -> None:
    """``seconds``: how long the core took over the event that handed out ``effect``."""
    if isinstance(effect, Count):
        metrics.count(effect.counter, effect.labels)
        return
    if effect.histogram:
        getattr(metrics, effect.histogram).observe(seconds)
    if effect.message:
        log.info(effect.message, **effect.fields, decision_ms=round(seconds * 1000, 3))
