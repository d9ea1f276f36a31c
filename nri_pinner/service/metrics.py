"""Prometheus metrics, on a private registry served by an opt-in localhost listener."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.pinning_requests = Counter("nri_pinner_pinning_requests", "Container admissions handled", registry=r)
        self.pinning_errors = Counter("nri_pinner_pinning_errors", "Admissions rejected or failed",
                                      ["reason"], registry=r)
        self.fail_open = Counter("nri_pinner_fail_open", "Containers started on the shared pool instead",
                                 ["cause"], registry=r)
        self.shared_pool_cpus = Gauge("nri_pinner_shared_pool_cpus", "CPUs in the shared pool", registry=r)
        self.exclusive_cpus = Gauge("nri_pinner_exclusive_cpus", "CPUs held exclusively", registry=r)
        self.allocation_seconds = Histogram(
            "nri_pinner_allocation_duration_seconds", "Time to decide one admission",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0), registry=r)
        self.nri_reconnects = Counter("nri_pinner_nri_reconnects", "NRI (re)connections", registry=r)
        self.reconcile_repairs = Counter("nri_pinner_reconcile_repairs", "Drifted cpusets repaired",
                                         ["path"], registry=r)
        self.late_replies = Counter("nri_pinner_late_handler_replies",
                                    "Handlers cut off at the budget (fallback answered)", ["method"], registry=r)
        self.runtime = Info("nri_pinner_runtime", "The container runtime we are connected to", registry=r)
        self.provider_admissions = Counter("nri_pinner_provider_admissions",
                                           "Admissions a hint provider took part in", ["provider"], registry=r)
        self.provider_rejections = Counter("nri_pinner_provider_rejections",
                                           "Rejections a hint provider could not be satisfied in", ["provider"],
                                           registry=r)

    def count_providers(self, decision: Any) -> None:
        """Per-provider admission/rejection counts from an engine ``Decision``."""
        if decision.admitted:
            for provider in decision.provider_hints:
                self.provider_admissions.labels(provider).inc()
        else:
            for name in {b.split("[")[0] for b in decision.blamed}:
                self.provider_rejections.labels(name).inc()

    def serve(self, address: str, port: int) -> None:
        start_http_server(port, addr=address, registry=self.registry)
