"""TEST DOUBLE: the kubelet's PodResources gRPC service (v1 List and GetAllocatableResources) on a unix socket.

Not used in production. Real gRPC, real protobuf bytes (our messages, the kubelet's field numbers and
method paths); what it answers is set by the test: the pods and their devices, the allocatable
devices, a status code to fail with, or a delay (for deadlines). ``Get`` is not served (the kubelet
keeps it off by default), so a call to it gets UNIMPLEMENTED, as from a kubelet without the gate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent import futures
from typing import Any

import grpc

from nri_pinner.edge.gen import podresources_pb2 as pr

SERVICE = "v1.PodResourcesLister"

# (resource name, device ids, NUMA nodes or None for no topology): one ContainerDevices
Devices = tuple[str, Sequence[str], Sequence[int] | None]


def container_devices(entries: Iterable[Devices]) -> list[pr.ContainerDevices]:
    out = []
    for resource, ids, numa in entries:
        d = pr.ContainerDevices(resource_name=resource, device_ids=list(ids))
        if numa is not None:
            d.topology.nodes.extend(pr.NUMANode(ID=n) for n in numa)
        out.append(d)
    return out


class FakeKubelet:
    """``pods``: {(namespace, name): {container: [Devices, ...]}}; ``allocatable``: [Devices, ...]."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.pods: dict[tuple[str, str], dict[str, list[Devices]]] = {}
        self.allocatable: list[Devices] = []
        self.fail: dict[str, grpc.StatusCode] = {}  # method -> status code to answer with
        self.delay: dict[str, float] = {}  # method -> seconds to sleep before answering
        self.calls: dict[str, int] = {"List": 0, "GetAllocatableResources": 0}
        self._called = threading.Condition()
        self._server: grpc.Server | None = None

    def set_pod(self, namespace: str, name: str, containers: Mapping[str, Sequence[Devices]]) -> None:
        self.pods[(namespace, name)] = {c: list(d) for c, d in containers.items()}

    # -- handlers --------------------------------------------------------------------------------
    def _enter(self, method: str, context: grpc.ServicerContext) -> None:
        with self._called:
            self.calls[method] += 1
            self._called.notify_all()
        if self.delay.get(method):
            time.sleep(self.delay[method])
        code = self.fail.get(method)
        if code is not None:
            context.abort(code, f"fake kubelet: {method} fails with {code.name}")

    def _list(self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext) -> pr.ListPodResourcesResponse:
        self._enter("List", context)
        out = pr.ListPodResourcesResponse()
        for (namespace, name), containers in self.pods.items():
            p = out.pod_resources.add(namespace=namespace, name=name)
            for cname, devices in containers.items():
                p.containers.add(name=cname, devices=container_devices(devices))
        return out

    def _allocatable(self, request: pr.AllocatableResourcesRequest,
                     context: grpc.ServicerContext) -> pr.AllocatableResourcesResponse:
        self._enter("GetAllocatableResources", context)
        return pr.AllocatableResourcesResponse(devices=container_devices(self.allocatable))

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> FakeKubelet:
        handlers: dict[str, Any] = {
            "List": grpc.unary_unary_rpc_method_handler(
                self._list, request_deserializer=pr.ListPodResourcesRequest.FromString,
                response_serializer=pr.ListPodResourcesResponse.SerializeToString),
            "GetAllocatableResources": grpc.unary_unary_rpc_method_handler(
                self._allocatable, request_deserializer=pr.AllocatableResourcesRequest.FromString,
                response_serializer=pr.AllocatableResourcesResponse.SerializeToString),
        }
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        self._server.add_insecure_port(f"unix://{self.socket_path}")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None

    def wait_calls(self, method: str, at_least: int, timeout: float = 5.0) -> bool:
        """Block until ``method`` was called ``at_least`` times in all."""
        with self._called:
            return self._called.wait_for(lambda: self.calls[method] >= at_least, timeout)

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
