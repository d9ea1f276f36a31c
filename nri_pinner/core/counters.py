"""The counters the node core bumps, as a typing Protocol: exactly what the core calls.

The edge's Prometheus metrics (edge/observe/metrics.py, `Metrics`) satisfy it structurally, so the core
names no edge module. Read-only members, so an attribute holding a prometheus_client metric matches.
"""

from __future__ import annotations

from typing import Protocol

from ..engine.decision import Decision


class Incrementable(Protocol):
    def inc(self) -> None: ...


class Labelled(Protocol):
    def labels(self, *values: str) -> Incrementable: ...


class Settable(Protocol):
    def set(self, value: float) -> None: ...


class Observable(Protocol):
    def observe(self, amount: float) -> None: ...


class Counters(Protocol):
    """What the core counts: admissions and their refusals, unreadable input, late replies, resizes, and
    the pool gauges it sets after each change."""

    @property
    def pinning_requests(self) -> Incrementable: ...
    @property
    def allocation_seconds(self) -> Observable: ...
    @property
    def fail_open(self) -> Labelled: ...
    @property
    def bad_input(self) -> Labelled: ...
    @property
    def late_replies(self) -> Labelled: ...
    @property
    def resizes(self) -> Labelled: ...
    @property
    def shared_pool_cpus(self) -> Settable: ...
    @property
    def exclusive_cpus(self) -> Settable: ...

    def rejected(self, reason: str) -> None: ...

    def count_providers(self, decision: Decision) -> None: ...
