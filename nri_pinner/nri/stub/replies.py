"""The stub builds the NRI responses from a handler's typed reply (:mod:`nri_pinner.nri.handlers`).

Raw response protos pass through unchanged and None is the empty response; anything else is the
wrong type, which the stub answers with an error status (:class:`WrongReplyType`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CpusetUpdate, CreateReply, UpdatesReply


class WrongReplyType(TypeError):
    """A handler (or fallback, or resolved ParkedReply) answered with a type its event does not take."""


def container_update(update: CpusetUpdate) -> api.ContainerUpdate:
    """``linux.resources.cpu.{cpus,mems}`` (and ``quota`` when set) and ``ignore_failure`` of one container."""
    proto = api.ContainerUpdate(container_id=update.container_id, ignore_failure=update.ignore_failure)
    cpu = proto.linux.resources.cpu
    cpu.cpus = update.cpus
    cpu.mems = update.mems
    if update.cpu_quota is not None:
        _set_quota(cpu, update.cpu_quota)
    return proto


def _set_quota(cpu: api.LinuxCPU, quota: int) -> None:
    """An OptionalInt64: present means "set", whatever the value (containerd: ``if v := GetQuota(); v != nil``);
    -1 goes out as the 10-byte varint Go's int64 uses, which runc applies as "no limit"."""
    cpu.quota.SetInParent()
    cpu.quota.value = quota


def container_updates(updates: Iterable[CpusetUpdate]) -> list[api.ContainerUpdate]:
    return [container_update(u) for u in updates]


def create_response(reply: CreateReply) -> api.CreateContainerResponse:
    """The adjustment sets only the non-empty fields; the updates follow in order."""
    response = api.CreateContainerResponse(update=container_updates(reply.updates))
    if reply.cpus:
        response.adjust.linux.resources.cpu.cpus = reply.cpus
    if reply.mems:
        response.adjust.linux.resources.cpu.mems = reply.mems
    if reply.cpu_quota is not None:
        _set_quota(response.adjust.linux.resources.cpu, reply.cpu_quota)
    return response


# Responses a typed UpdatesReply converts to (each has a repeated ContainerUpdate ``update``).
_UPDATES_RESPONSES = (api.UpdateContainerResponse, api.StopContainerResponse)


def response(result: object, response_type: type[Any]) -> Any:
    """The ``response_type`` message for a handler's result; WrongReplyType if it cannot be one."""
    if result is None:
        return response_type()
    if isinstance(result, response_type):
        return result
    if isinstance(result, CreateReply) and response_type is api.CreateContainerResponse:
        return create_response(result)
    if isinstance(result, UpdatesReply) and response_type in _UPDATES_RESPONSES:
        return response_type(update=container_updates(result.updates))
    raise WrongReplyType(f"{type(result).__name__}, expected {response_type.__name__}")


def synchronize_updates(result: object) -> list[api.ContainerUpdate]:
    """The ``update`` list of the final SynchronizeResponse."""
    if result is None:
        return []
    if isinstance(result, UpdatesReply):
        return container_updates(result.updates)
    if isinstance(result, (str, bytes)) or not isinstance(result, Iterable):
        raise WrongReplyType(f"{type(result).__name__}, expected UpdatesReply or ContainerUpdate list")
    updates = list(result)
    if not all(isinstance(u, api.ContainerUpdate) for u in updates):
        raise WrongReplyType("synchronize returned a list that is not all ContainerUpdate")
    return updates
