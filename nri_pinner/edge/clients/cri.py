"""Async CRI client for the drift repair: the kubelet's own path (UpdateContainerResources).

On NRI older than v0.12.1 an unsolicited NRI UpdateContainers can deadlock containerd; a CRI
call takes the runtime's locks in lifecycle order instead. Only the cpuset fields are set:
containerd leaves empty fields untouched. grpc.aio keeps the event loop free while the call is
in flight, because the call comes back to us as an NRI UpdateContainer we must answer.
"""

from __future__ import annotations

import grpc

from ..gen import cri_repair_pb2 as cri

SERVICE = "/runtime.v1.RuntimeService/"


class CRIClient:
    def __init__(self, socket_path: str, timeout: float = 10.0) -> None:
        self._target = f"unix://{socket_path}"
        self._timeout = timeout
        self._channel: grpc.aio.Channel | None = None

    def _chan(self) -> grpc.aio.Channel:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self._target)
        return self._channel

    async def update_cpuset(self, container_id: str, cpus: str, mems: str = "", timeout: float | None = None) -> None:
        call = self._chan().unary_unary(
            SERVICE + "UpdateContainerResources",
            request_serializer=cri.UpdateContainerResourcesRequest.SerializeToString,
            response_deserializer=cri.UpdateContainerResourcesResponse.FromString,
        )
        request = cri.UpdateContainerResourcesRequest(
            container_id=container_id,
            linux=cri.LinuxContainerResources(cpuset_cpus=cpus, cpuset_mems=mems),
        )
        await call(request, timeout=timeout or self._timeout)

    async def version(self) -> cri.VersionResponse:
        call = self._chan().unary_unary(
            SERVICE + "Version",
            request_serializer=cri.VersionRequest.SerializeToString,
            response_deserializer=cri.VersionResponse.FromString,
        )
        response: cri.VersionResponse = await call(cri.VersionRequest(version="v1"), timeout=self._timeout)
        return response

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None
