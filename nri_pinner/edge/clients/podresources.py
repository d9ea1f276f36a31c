"""The kubelet's PodResources API, read in the background: ``GetAllocatableResources`` at start and on
the timer, ``List`` at start, on every RunPodSandbox (the kubelet allocates a pod's devices when it
admits the pod, before the sandbox runs) and on the timer.

One thread does every call (blocking gRPC over the unix socket, with a deadline) and hands each new
immutable :class:`PodResourcesView` to the node thread (``deliver``), which adopts it and tells the
core (`PodResourcesListed`); handlers read whatever view is current and never wait (no lock: the view
and what it answers are written on the node thread only). A create
whose pod the view does not list yet goes on without PodResources hints and is counted
(``nri_pinner_podresources_misses``: ``pending`` when a List for its pod was asked and has not
finished, ``unlisted`` when the latest List does not have it). An absent socket (no kubelet, or a
node without the pod-resources directory mounted) is logged once at info and retried quietly; call
errors and timeouts are logged at most once a minute and counted, and never reach a handler.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import grpc
import structlog
from prometheus_client import CollectorRegistry, Counter

from ...engine.admission_engine import Engine
from ...engine.devicemanager.hints import Device
from ...engine.devicemanager.podresources import (
    DeviceEntry,
    PodResourcesHintProvider,
    PodResourcesView,
    devices_by_resource,
)
from ..gen import podresources_pb2 as pr

log = structlog.get_logger("nri_pinner.podresources")

SERVICE = "/v1.PodResourcesLister/"  # the kubelet's proto package is "v1"; Get (alpha) is never called
POD_NAMESPACE, POD_NAME = "io.kubernetes.pod.namespace", "io.kubernetes.pod.name"  # kubelet container labels
POD_UID, CONTAINER_NAME = "io.kubernetes.pod.uid", "io.kubernetes.container.name"
ERROR_LOG_SECONDS = 60.0


class PodResourcesClient:
    """Blocking calls with a deadline; the channel is made on first use and kept."""

    def __init__(self, socket_path: str, timeout: float) -> None:
        self.socket_path, self.timeout = socket_path, timeout
        self._channel: grpc.Channel | None = None

    def _call(self, method: str, request: Any, response: Any) -> Any:
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
        call = self._channel.unary_unary(SERVICE + method, request_serializer=type(request).SerializeToString,
                                         response_deserializer=response.FromString)
        return call(request, timeout=self.timeout)

    def list(self) -> pr.ListPodResourcesResponse:
        out: pr.ListPodResourcesResponse = self._call("List", pr.ListPodResourcesRequest(),
                                                      pr.ListPodResourcesResponse)
        return out

    def allocatable(self) -> pr.AllocatableResourcesResponse:
        out: pr.AllocatableResourcesResponse = self._call(
            "GetAllocatableResources", pr.AllocatableResourcesRequest(), pr.AllocatableResourcesResponse)
        return out

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None


def _entries(devices: Iterable[pr.ContainerDevices]) -> list[DeviceEntry]:
    return [(d.resource_name, list(d.device_ids),
             [n.ID for n in d.topology.nodes] if d.HasField("topology") else None) for d in devices]


def view_of(listed: pr.ListPodResourcesResponse | None,
            allocatable: pr.AllocatableResourcesResponse | None) -> PodResourcesView:
    """The immutable snapshot of one List (and the latest GetAllocatableResources)."""
    pods = {} if listed is None else {
        (p.namespace, p.name): {c.name: devices_by_resource(_entries(c.devices)) for c in p.containers}
        for p in listed.pod_resources}
    return PodResourcesView(pods, devices_by_resource(_entries(allocatable.devices)) if allocatable else {})


class PodResourcesMetrics:
    def __init__(self, registry: CollectorRegistry, per_provider: Iterable[Counter] = ()) -> None:
        for counter in per_provider:  # the service's provider admission/rejection counters: shown from the start
            counter.labels("podresources")
        self.calls = Counter("nri_pinner_podresources_calls", "PodResources calls, by method and outcome",
                             ["method", "outcome"], registry=registry)
        self.misses = Counter("nri_pinner_podresources_misses", "Admissions without PodResources hints: the "
                              "pod was not in the latest List", ["reason"], registry=registry)
        for method in ("List", "GetAllocatableResources"):
            for outcome in ("ok", "error", "timeout"):
                self.calls.labels(method, outcome)
        for reason in ("pending", "unlisted"):
            self.misses.labels(reason)


class PodResources:
    """The fetcher thread and the current snapshot; also the provider's :class:`PodDevicesSource`."""

    def __init__(self, socket_path: str, refresh_seconds: float, timeout: float = 2.0,
                 client: PodResourcesClient | None = None) -> None:
        self.socket_path, self.refresh_seconds = socket_path, refresh_seconds
        self.client = client or PodResourcesClient(socket_path, timeout)
        self.view = PodResourcesView()  # replaced whole, never changed in place
        self.available: bool | None = None  # the socket was there at the last fetch (None: not tried yet)
        self.metrics: PodResourcesMetrics | None = None
        # No lock: only the handler thread writes _pods/_asked/_asks, only the fetcher _answered and view.
        self._pods: dict[str, tuple[str, str]] = {}  # pod key (uid or name) and sandbox id -> (namespace, name)
        self._asked: dict[tuple[str, str], int] = {}  # pod -> number of the RunPodSandbox that asked for a List
        self._asks = 0
        self._answered = 0  # every ask up to this one is in the current view
        self._allocatable: pr.AllocatableResourcesResponse | None = None
        self._kick, self._stop = threading.Event(), threading.Event()
        self._last_error_log = 0.0
        self.listed_at: float | None = None  # wall clock of the last successful List (status)
        self._thread: threading.Thread | None = None
        # the node thread's doorway for a fetched List (the service sets it; None: adopted on the fetcher)
        self.deliver: Callable[[PodResourcesView | None, int], None] | None = None

    # -- handler side (never blocks) -------------------------------------------------------------
    def pod_started(self, pod: Any) -> None:
        """RunPodSandbox: remember who the pod is and ask for a List."""
        where = (pod.namespace, pod.name)
        if len(self._pods) > 4 * len(self.view.pods) + 256:  # forget pods gone from the node
            self._pods = {k: w for k, w in self._pods.items() if w in self.view.pods or self._pending(w)}
            self._asked = {w: n for w, n in self._asked.items() if n > self._answered}
        self._pods[pod.uid or pod.name] = where
        self._pods[pod.id] = where
        self._asks += 1
        self._asked[where] = self._asks
        self._kick.set()

    def _pending(self, where: tuple[str, str]) -> bool:
        return self._asked.get(where, 0) > self._answered

    def reported(self, container: Any) -> Mapping[str, Sequence[Device]]:
        """What PodResources reports for an NRI container (kubelet labels, else its sandbox); {} if nothing."""
        labels = container.labels
        where = (labels.get(POD_NAMESPACE, ""), labels.get(POD_NAME, ""))
        if all(where):
            for key in (labels.get(POD_UID, ""), container.pod_sandbox_id):
                if key:
                    self._pods[key] = where
        else:
            where = self._pods.get(container.pod_sandbox_id, ("", ""))
        return self.view.container(*where, labels.get(CONTAINER_NAME) or container.name) or {}

    def held(self, pod_key: str, container: str | None) -> Mapping[str, Sequence[Device]] | None:
        where = self._pods.get(pod_key)
        if where is None or self.available is False:
            return None  # not a pod we know, or no kubelet: nothing to miss
        pending = self._pending(where)  # before reading the view: the fetcher swaps the view in first
        view = self.view
        found = view.pod(*where) if container is None else view.container(*where, container)
        if found is None:
            if self.metrics is not None:
                self.metrics.misses.labels("pending" if pending else "unlisted").inc()
            if not pending:
                self._kick.set()  # the kubelet may have admitted it since: list again
        return found

    def allocatable(self) -> Mapping[str, Sequence[Device]]:
        return self.view.allocatable

    def listed(self, namespace: str, pod: str, container: str) -> bool | None:
        """Is the container in the cached List? None when the List does not have the pod (not yet:
        it may lag a create). The kubelet lists a pod's app and restartable init containers, never
        its regular init containers (v1.32 pkg/kubelet/apis/podresources/server_v1.go List), so a
        pod listed without the container means a regular init container. Never waits."""
        if self.available is False:
            return None
        containers = self.view.pods.get((namespace, pod))
        return None if containers is None else container in containers

    def refresh(self) -> None:
        """Ask the fetcher thread for a new List (returns at once)."""
        self._kick.set()

    # -- the fetcher thread ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="podresources", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.client.close()

    def _run(self) -> None:
        next_full = 0.0  # GetAllocatableResources at start, then every refresh
        while not self._stop.is_set():
            self._kick.clear()  # before the calls: a RunPodSandbox during them asks for one more round
            now = time.monotonic()
            self.fetch(allocatable=now >= next_full)
            if now >= next_full:
                next_full = now + self.refresh_seconds
            self._kick.wait(self.refresh_seconds)

    def fetch(self, allocatable: bool = True) -> bool:
        """One round of calls; True when the List succeeded. Runs on the fetcher thread (and in tests)."""
        if not os.path.exists(self.socket_path):
            if self.available is not False:
                log.info("kubelet PodResources socket absent: no PodResources hints until it appears",
                         socket=self.socket_path)
            self.available = False
            self._hand_over(None, self._asks)  # nothing to wait for
            return False
        if self.available is False:
            log.info("kubelet PodResources socket found", socket=self.socket_path)
        self.available = True
        if allocatable or self._allocatable is None:
            got = self._try("GetAllocatableResources", self.client.allocatable)
            if got is not None:
                self._allocatable = got
        asks = self._asks  # the pods asked for so far are in this List's answer
        listed = self._try("List", self.client.list)
        if listed is None:
            return False
        self._hand_over(view_of(listed, self._allocatable), asks)
        return True

    def _hand_over(self, view: PodResourcesView | None, asks: int) -> None:
        if self.deliver is not None:
            self.deliver(view, asks)
        else:
            self.adopt(view, asks)

    def adopt(self, view: PodResourcesView | None, asks: int) -> None:
        """On the node thread: ``view`` (None: the socket is absent) answers every ask up to ``asks``."""
        if view is not None:
            self.view = view
            self.listed_at = time.time()
        self._answered = max(self._answered, asks)

    def listed_pods(self) -> dict[tuple[str, str], frozenset[str]] | None:
        """What the core is told: the containers the current List has per pod (None: no kubelet)."""
        if self.available is False:
            return None
        return {where: frozenset(containers) for where, containers in self.view.pods.items()}

    def summary(self) -> dict[str, Any]:
        """For `nri-pinner status`: is the kubelet there, how fresh is the snapshot, what does it hold."""
        view = self.view
        return {"socket": self.socket_path, "available": self.available, "listed_at": self.listed_at,
                "pods": len(view.pods), "allocatable": {r: len(d) for r, d in sorted(view.allocatable.items())}}

    def _try(self, method: str, call: Callable[[], Any]) -> Any:
        try:
            out = call()
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            outcome = "timeout" if code == grpc.StatusCode.DEADLINE_EXCEEDED else "error"
            self._count(method, outcome)
            now = time.monotonic()
            if now - self._last_error_log >= ERROR_LOG_SECONDS or not self._last_error_log:
                self._last_error_log = now
                log.warning("PodResources call failed; retrying on the timer", method=method, outcome=outcome,
                            code=code.name if code else None,
                            details=exc.details() if isinstance(exc, grpc.Call) else str(exc))
            return None
        self._count(method, "ok")
        return out

    def _count(self, method: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.calls.labels(method, outcome).inc()


def podresources_of(engine: Engine) -> PodResources | None:
    """The fetcher behind the engine's PodResources provider, if it has one."""
    for p in engine.extra_providers:
        if isinstance(p, PodResourcesHintProvider) and isinstance(p.source, PodResources):
            return p.source
    return None
