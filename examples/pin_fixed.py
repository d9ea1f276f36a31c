"""Example NRI plugin: pins every new container to a fixed cpuset, optionally moving the others.

    python -m examples.pin_fixed --socket /var/run/nri/nri.sock --cpus 1 --others 0 \\
        --log /tmp/pin-fixed.jsonl

In CreateContainer it answers with a ``linux.resources.cpu.cpus`` adjustment (``--cpus``) and, with
``--others``, in the same reply an update moving every other container it knows of (from Synchronize
and earlier CreateContainers, minus removed ones) to that cpuset: the shape of a reply that shrinks a
shared pool when a container gets exclusive CPUs. It knows nothing about CPU topology; cpusets are
passed through as written.

Pre-installed (``plugin_path/NN-name``): the runtime passes only NRI_PLUGIN_NAME, NRI_PLUGIN_IDX and
NRI_PLUGIN_SOCKET, so launch it through a wrapper script that adds the options.

The ``--log`` file gets one JSON object per line: ``{"time", "event", ...}`` for Configure (runtime
name/version), Synchronize (pod/container counts, their encoded size, requests served so far, handler
time), CreateContainer (adjusted cpus, updates) and RemoveContainer.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

from examples.cli import run_example
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub import DEFAULT_SOCKET_PATH, Stub, StubStats, serve

_CPU_LIST_RE = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def cpu_list(text: str) -> str:
    """argparse type: a Linux cpu list such as ``1`` or ``0-3,8``."""
    if not _CPU_LIST_RE.match(text):
        raise argparse.ArgumentTypeError(f"not a cpu list like '1' or '0-3,8': {text!r}")
    return text


def _cpus_resources(cpus: str) -> api.LinuxResources:
    return api.LinuxResources(cpu=api.LinuxCPU(cpus=cpus))


class FixedPinner:
    """NRI plugin object: fixed cpuset for new containers, ``others`` for the rest (if set)."""

    def __init__(self, out: TextIO, cpus: str, others: str | None = None) -> None:
        self.cpus = cpu_list(cpus)
        self.others = cpu_list(others) if others is not None else None
        self.stub_stats: StubStats | None = None  # set by the launcher to log request counts
        self._out = out
        self._lock = threading.Lock()
        self._known: dict[str, str] = {}  # container id -> name, every container not yet removed

    def _write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"time": round(time.time(), 6), "event": event, **fields}, sort_keys=True)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()  # e2e tests tail the file while the plugin runs

    def on_connect(self) -> None:
        self._known.clear()  # a new connection re-sends the whole state in Synchronize

    def configure(self, req: api.ConfigureRequest) -> None:
        self._write("Configure", runtime_name=req.runtime_name, runtime_version=req.runtime_version,
                    request_timeout_ms=req.request_timeout, config=req.config)

    def synchronize(self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]) -> None:
        started = time.monotonic()
        self._known = {c.id: c.name for c in containers}
        size = sum(p.ByteSize() for p in pods) + sum(c.ByteSize() for c in containers)
        requests = self.stub_stats.requests if self.stub_stats is not None else None
        self._write("Synchronize", pods=len(pods), containers=len(containers), encoded_bytes=size,
                    stub_requests=requests, handler_s=round(time.monotonic() - started, 6))

    def create_container(self, req: api.CreateContainerRequest) -> api.CreateContainerResponse:
        reply = api.CreateContainerResponse()
        reply.adjust.linux.resources.CopyFrom(_cpus_resources(self.cpus))
        if self.others is not None:
            for cid in self._known:
                reply.update.add(container_id=cid, linux=api.LinuxContainerUpdate(
                    resources=_cpus_resources(self.others)))
        self._known[req.container.id] = req.container.name
        self._write("CreateContainer", container=req.container.id, name=req.container.name,
                    pod=req.pod.name, cpus=self.cpus, updates={u.container_id: self.others for u in reply.update})
        return reply

    def remove_container(self, event: api.StateChangeEvent) -> None:
        self._known.pop(event.container.id, None)
        self._write("RemoveContainer", container=event.container.id)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m examples.pin_fixed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", help=f"NRI socket of the runtime (default {DEFAULT_SOCKET_PATH}, or the "
                        "inherited NRI_PLUGIN_SOCKET fd when that is set)")
    parser.add_argument("--cpus", type=cpu_list, required=True, help="cpuset for every new container")
    parser.add_argument("--others", type=cpu_list, help="cpuset to move all other known containers to")
    parser.add_argument("--log", default="-", help="file to append JSON lines to ('-' = stderr)")
    parser.add_argument("--name", default="pin-fixed", help="plugin name (external mode)")
    parser.add_argument("--idx", default="50", help="two-digit plugin index (external mode)")
    parser.add_argument("--verbose", action="store_true", help="debug logging of the stub to stderr")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace, out: TextIO) -> int:
    log = logging.getLogger("examples.pin_fixed")
    plugin = FixedPinner(out, args.cpus, args.others)
    try:
        stub = Stub(plugin, name=args.name, idx=args.idx, socket_path=args.socket)
    except ValueError as exc:
        log.error("invalid setup: %s", exc)
        return 2
    plugin.stub_stats = stub.stats
    return await serve(stub)


def main(argv: Sequence[str] | None = None) -> int:
    return run_example(parse_args(argv), run)


if __name__ == "__main__":
    sys.exit(main())
