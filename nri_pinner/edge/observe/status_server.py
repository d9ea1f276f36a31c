"""The local inspection service: gRPC on a root-only unix socket, JSON documents as replies."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from ... import __version__
from ...core.state import Mems, View, desired_of, mems_text
from ...engine.cpuset import CPUSet
from ...engine.nicmanager.hints import nic_hints
from ...nri.stub import Stub
from ..gen import inspect_pb2 as pb

SERVICE = "nri_pinner.inspect.v1.Inspect"


def status_document(view: View, stub: Stub | None, reconcile_repairs: int = 0,
                    nics: list[dict[str, Any]] | None = None,
                    podresources: dict[str, Any] | None = None,
                    cgroup_writes: dict[str, int] | None = None) -> dict[str, Any]:
    """Built from the newest published view: no lock, so a status query never waits on a handler."""
    engine, state, shared = view.engine, view.state, view.shared_pool
    topo = engine.topology
    mems: dict[CPUSet, Mems] = {}

    def mems_of(cpus: CPUSet) -> Mems:  # every shared container asks for the same pool's
        if cpus not in mems:
            mems[cpus] = engine.mems_of(cpus)
        return mems[cpus]

    assignments = []
    for t in sorted(view.containers.values(), key=lambda t: (t.intent.namespace, t.intent.pod_name, t.key)):
        a = state.get(*t.key)
        exclusive = a is not None and a.exclusive
        cpus, cpu_mems = desired_of(engine, state, shared, t.key, mems_of)
        assignments.append({
            "container_id": t.container_id, "namespace": t.intent.namespace, "pod": t.intent.pod_name,
            "pod_uid": t.intent.pod_uid, "container": t.intent.container, "qos": t.intent.qos,
            "exclusive": exclusive, "cpus": str(cpus), "mems": mems_text(cpu_mems),
            "admitted": str(a.admitted) if a and a.exclusive else "", "init": t.intent.init,
            "stopped": t.stopped, "intent_source": t.intent.source,
            **({"pod_level_resources": t.intent.pod_level} if t.intent.pod_level else {}),
            **({"hints": t.hints} if t.hints else {}),
            **({"resize": t.last_resize} if t.last_resize else {}),
        })
    pools = {
        "shared": str(shared), "reserved": str(engine.policy.reserved),
        "isolated": str(topo.isolated), "exclusive": str(state.exclusive_cpus()),
        "offline": str(topo.all_cpus - topo.online), "online": str(topo.online),
    }
    decisions = list(view.decisions)
    health: dict[str, Any] = stub.status() if stub is not None else {"connected": False}
    health["reconcile_repairs"] = reconcile_repairs
    health["state_generation"] = view.generation
    health["cgroup_writes"] = cgroup_writes  # the cgroup writer's counters; None: writes off
    health["version"] = __version__
    doc: dict[str, Any] = {
        "assignments": assignments, "pools": pools, "topology": topo.to_json(), "decisions": decisions,
        "health": health, "policy": {"topology_manager": engine.manager.policy.value, "scope": engine.scope}}
    if state.pod_blocks:  # pod scope, pod-level: each pod's block, its parts and its pod pool
        doc["pod_blocks"] = {pod: b.to_dict() for pod, b in sorted(state.pod_blocks.items())}
    if nics is not None:  # hints.providers has "nics": each sandbox's NICs and the hints they give
        for entry in nics:
            hints = nic_hints(topo.numa_nodes, entry.get("numa", ()))
            entry["hints"] = [str(h) for h in itertools.islice(hints, 8)] if hints else []  # lazily listed
        doc["nics"] = nics
    if podresources is not None:  # hints.providers has "podresources": the fetcher's state
        doc["podresources"] = podresources
    return doc


def _sections(doc: Callable[[], dict[str, Any]]) -> dict[str, Callable[[], Any]]:
    return {
        "Assignments": lambda: doc()["assignments"], "Topology": lambda: doc()["topology"],
        "Pools": lambda: doc()["pools"], "Decisions": lambda: doc()["decisions"],
        "Health": lambda: doc()["health"], "Status": doc,
    }


async def start_server(socket_path: str, document: Callable[[], dict[str, Any]],
                       on_bound: Callable[[os.stat_result], None] | None = None) -> grpc.aio.Server:
    """``on_bound``: told which file the socket is (before it takes the path: a process that replaces
    the path after that is never mistaken for this one)."""
    def handler(section: Callable[[], Any]) -> grpc.RpcMethodHandler[Any, Any]:
        async def call(_request: pb.InspectRequest, _context: grpc.aio.ServicerContext[Any, Any]) -> pb.JsonReply:
            return pb.JsonReply(json=json.dumps(section(), default=dict))  # lazy hint summaries: Mappings

        return grpc.unary_unary_rpc_method_handler(
            call, request_deserializer=pb.InspectRequest.FromString,
            response_serializer=pb.JsonReply.SerializeToString)

    path = Path(socket_path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    # Bound under a name of this process's own, then renamed into place (atomically replacing a stale
    # socket): gRPC unlinks the path it bound when it stops, which would otherwise remove whatever
    # socket file is at `socket_path` by then, another process's included (the caller removes its own).
    bound = path.with_name(f".{path.name}.{os.getpid()}")
    if len(str(bound).encode()) > 107:  # sun_path's limit: bind the path itself
        bound = path
        path.unlink(missing_ok=True)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        SERVICE, {name: handler(fn) for name, fn in _sections(document).items()})])
    server.add_insecure_port(f"unix:{bound}")
    old = os.umask(0o177)  # the socket is created 0600: root only
    try:
        await server.start()
    finally:
        os.umask(old)
    os.chmod(bound, 0o600)
    if on_bound is not None:
        on_bound(os.stat(bound))
    if bound != path:
        os.replace(bound, path)
    return server


def query(socket_path: str, method: str = "Status", timeout: float = 5.0) -> Any:
    """Synchronous client used by the CLI."""
    with grpc.insecure_channel(f"unix:{socket_path}") as channel:
        call = channel.unary_unary(f"/{SERVICE}/{method}", request_serializer=pb.InspectRequest.SerializeToString,
                                   response_deserializer=pb.JsonReply.FromString)
        reply: pb.JsonReply = call(pb.InspectRequest(), timeout=timeout)
    return json.loads(reply.json)
