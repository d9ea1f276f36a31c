"""Prometheus metrics on a private registry; served with the health endpoints by `metrics_http`.

Every labelled counter has its known series created at zero, so a rate() or an alert on a reason
that has not happened yet still has a series to work on. Connection state, the runtime's identity
and the per-NUMA pools are read at scrape time from the stub and the core's published view (immutable snapshots,
no lock taken: a scrape never delays an NRI reply).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...core.effects import CounterName
    from ...core.state import View
    from ..cgroups.cpuset_writer import WriteCounts

# Rejection reasons and the part of the engine (the "provider") that raises each: the CPU manager's
# static policy, the topology manager's merge of every hint provider, or the pod's own annotations.
REJECTIONS: dict[str, str] = {
    "SMTAlignmentError": "cpu",
    "InsufficientCPUs": "cpu",
    "AdmissionError": "cpu",
    "TopologyAffinityError": "topology",
    "BadAnnotation": "annotations",
}
FAIL_OPEN_CAUSES = ("rejected", "timeout")
# create refused, kept shared at Synchronize, or noderesource.dev/resources not used (values inferred)
BAD_INPUT_SOURCES = ("annotation", "container", "noderesource")
LATE_METHODS = ("CreateContainer", "StartContainer", "UpdateContainer")  # replies sent after their wait
REPAIR_PATHS = ("cri", "next-reply")
# in-place resize outcomes (engine ResizeDecision.kind) and refusal reasons (README "Resize")
RESIZE_KINDS = ("grow", "shrink", "to-exclusive", "to-shared", "unchanged", "shared", "annotation")
RESIZE_REFUSALS = ("InsufficientCPUs", "SMTAlignmentError", "TopologyAffinityError", "ResizeBelowBaseline",
                   "QoSClassChange", "AdmissionError", "UnknownContainer")
PROVIDERS = ("cpu", "static", "devices", "memory", "nics")  # hint providers, as the engine names them


class ConnectionView(Protocol):
    """What the metrics need from the NRI stub (nri_pinner.nri.stub.Stub)."""

    @property
    def connected(self) -> bool: ...

    @property
    def synchronized(self) -> bool: ...


class RuntimeInfo:
    """The runtime's identity from Configure; exported only while connected."""

    def __init__(self) -> None:
        self.labels: dict[str, str] = {}

    def info(self, labels: dict[str, str]) -> None:
        self.labels = dict(labels)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        ProcessCollector(registry=r)  # process_* (CPU seconds, RSS, open fds, start time)
        self.pinning_requests = Counter("nri_pinner_pinning_requests", "Container admissions handled", registry=r)
        self.pinning_errors = Counter("nri_pinner_pinning_errors", "Admissions rejected or failed",
                                      ["reason"], registry=r)
        self.admission_errors = Counter("nri_pinner_admission_errors", "Admissions rejected, by reason and by the "
                                        "provider that refused", ["reason", "provider"], registry=r)
        self.fail_open = Counter("nri_pinner_fail_open", "Containers started on the shared pool instead",
                                 ["cause"], registry=r)
        self.allocation_seconds = Histogram(
            "nri_pinner_allocation_duration_seconds",
            "Time the node core takes for one create (the admission and its bookkeeping)",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0), registry=r)
        self.nri_reconnects = Counter("nri_pinner_nri_reconnects", "NRI (re)connections", registry=r)
        self.reconcile_repairs = Counter("nri_pinner_reconcile_repairs", "Drifted cpusets repaired",
                                         ["path"], registry=r)
        self.record_updates = Counter("nri_pinner_runtime_record_updates", "Runtime records of a container's "
                                      "cpuset brought in line with its cgroup", ["outcome"], registry=r)
        for outcome in ("ok", "failed"):
            self.record_updates.labels(outcome)
        self.late_replies = Counter("nri_pinner_late_handler_replies",
                                    "Handlers cut off at the budget (fallback answered)", ["method"], registry=r)
        self.nic_lookups_late = Counter("nri_pinner_nic_lookups_late",
                                        "Creates admitted without NIC hints: the pod's NIC lookup was still running",
                                        registry=r)
        self.bad_input = Counter("nri_pinner_bad_input", "Container data that could not be read (create refused, "
                                 "the container kept on the shared pool at Synchronize, or noderesource.dev/resources "
                                 "not used)", ["source"], registry=r)
        for source in BAD_INPUT_SOURCES:
            self.bad_input.labels(source)
        for reason, provider in REJECTIONS.items():
            self.pinning_errors.labels(reason)
            self.admission_errors.labels(reason, provider)
        for cause in FAIL_OPEN_CAUSES:
            self.fail_open.labels(cause)
        for method in LATE_METHODS:
            self.late_replies.labels(method)
        for path in REPAIR_PATHS:
            self.reconcile_repairs.labels(path)
        self.provider_admissions = Counter("nri_pinner_provider_admissions",
                                           "Admissions a hint provider took part in", ["provider"], registry=r)
        self.provider_rejections = Counter("nri_pinner_provider_rejections",
                                           "Rejections a hint provider could not be satisfied in", ["provider"],
                                           registry=r)
        for provider in PROVIDERS:
            self.provider_admissions.labels(provider)
            self.provider_rejections.labels(provider)
        self.resizes = Counter("nri_pinner_resizes", "In-place resizes (NRI UpdateContainer with CPU shares or "
                               "quota): applied by kind, or refused by reason", ["outcome", "reason"], registry=r)
        for kind in RESIZE_KINDS:
            self.resizes.labels(kind, "")
        for reason in RESIZE_REFUSALS:
            self.resizes.labels("refused", reason)
        self.runtime = RuntimeInfo()
        self.stub: ConnectionView | None = None
        self.view: Callable[[], View] | None = None
        self.cgroup_writes: WriteCounts | None = None  # the writer's counters (updated in place), read at scrape
        r.register(_LiveCollector(self))

    def count(self, counter: CounterName, labels: tuple[str, ...] = ()) -> None:
        """One more of a counter the core counts (its `Count` effect): the attribute of that name."""
        if counter == "rejected":
            self.rejected(*labels)
            return
        metric: Counter = getattr(self, counter)
        (metric.labels(*labels) if labels else metric).inc()

    def watch(self, stub: ConnectionView, view: Callable[[], View], cgroup_writes: WriteCounts | None = None) -> None:
        """Where connection state, pools and the cgroup writer's counters are read from at scrape time."""
        self.stub, self.view, self.cgroup_writes = stub, view, cgroup_writes

    def rejected(self, reason: str) -> None:
        """One admission refused (whatever on_reject then does with it)."""
        self.pinning_errors.labels(reason).inc()
        self.admission_errors.labels(reason, REJECTIONS.get(reason, "other")).inc()

    @property
    def connected(self) -> bool:
        return self.stub is not None and self.stub.connected

    @property
    def synchronized(self) -> bool:
        return self.stub is not None and self.stub.synchronized


class _LiveCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        connected = m.connected
        yield GaugeMetricFamily("nri_pinner_connected", "1 while connected to the runtime's NRI socket",
                                value=int(connected))
        yield GaugeMetricFamily("nri_pinner_synchronized", "1 once the runtime's Synchronize was applied on the "
                                "current connection (cpusets are being managed)", value=int(m.synchronized))
        names = ("runtime", "version", "nri_version")
        info = GaugeMetricFamily("nri_pinner_runtime_info", "The container runtime connected to (no series while "
                                 "disconnected)", labels=names)
        if connected and m.runtime.labels:
            info.add_metric([m.runtime.labels.get(k, "") for k in names], 1)
        yield info
        exclusive = GaugeMetricFamily("nri_pinner_numa_exclusive_cpus", "CPUs held exclusively, per NUMA node",
                                      labels=["numa_node"])
        shared = GaugeMetricFamily("nri_pinner_numa_shared_cpus", "CPUs of the shared pool, per NUMA node",
                                   labels=["numa_node"])
        total = GaugeMetricFamily("nri_pinner_numa_online_cpus", "Online CPUs, per NUMA node", labels=["numa_node"])
        # the pools, read from the core's newest published view (the one place these gauges are set)
        pool_cpus = GaugeMetricFamily("nri_pinner_shared_pool_cpus", "CPUs in the shared pool")
        held_cpus = GaugeMetricFamily("nri_pinner_exclusive_cpus", "CPUs held exclusively")
        if m.view is not None:
            view = m.view()  # the newest published view: immutable, read without any lock
            pool_cpus.add_metric([], len(view.shared_pool))
            held_cpus.add_metric([], len(view.state.exclusive_cpus()))
            engine, state = view.engine, view.state
            held, pool = state.exclusive_cpus(), engine.policy.shared_pool(state) or engine.policy.reserved
            topo = engine.topology
            for node in topo.numa_nodes:
                cpus = topo.numa_cpus[node] & topo.online
                exclusive.add_metric([str(node)], len(cpus & held))
                shared.add_metric([str(node)], len(cpus & pool))
                total.add_metric([str(node)], len(cpus))
        yield pool_cpus
        yield held_cpus
        yield exclusive
        yield shared
        yield total
        writes = CounterMetricFamily("nri_pinner_cgroup_writes", "Direct cgroup cpuset writes (README \"Pool "
                                     "changes\"): containers written, files written, containers with nested "
                                     "cpusets, containers left to the NRI update, v1 load-balance flags "
                                     "cleared", labels=["kind"])
        if m.cgroup_writes is not None:
            for kind, value in asdict(m.cgroup_writes).items():
                writes.add_metric([kind], value)
        yield writes
