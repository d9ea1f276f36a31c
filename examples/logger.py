"""Example NRI plugin: logs every event it receives as one JSON object per line.

    python -m examples.logger --socket /var/run/nri/nri.sock --log /tmp/nri-events.jsonl

Pre-installed (launched by the runtime from ``plugin_path/NN-name``): the runtime passes only
NRI_PLUGIN_NAME, NRI_PLUGIN_IDX and NRI_PLUGIN_SOCKET, no arguments and no stdout/stderr, so launch it
through a small wrapper script that adds ``--log FILE``. Without ``--socket`` and with
NRI_PLUGIN_SOCKET set, the plugin uses that fd and the name/index from the environment.

Each line: ``{"time": <unix s>, "event": "<RPC name>", ...request fields}``. The plugin never adjusts
or updates anything.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from examples.cli import run_example
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.stub import DEFAULT_SOCKET_PATH, Stub, serve
from nri_pinner.nri.stub.handler_calls import STATE_EVENTS


def _fields(message: Message) -> dict[str, Any]:
    return MessageToDict(message, preserving_proto_field_name=True)


class EventLogger:
    """NRI plugin object: every handler writes a JSON line and answers 'no change'."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()
        self.count = 0

    def _write(self, event: str, fields: dict[str, Any]) -> None:
        line = json.dumps({"time": round(time.time(), 6), "event": event, **fields}, sort_keys=True)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()  # readers (e2e tests) tail the file while the plugin runs
            self.count += 1

    def on_connect(self) -> None:
        self._write("Connect", {})

    def on_close(self) -> None:
        self._write("Close", {})

    def configure(self, req: api.ConfigureRequest) -> None:
        self._write("Configure", _fields(req))

    def synchronize(self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]) -> None:
        self._write("Synchronize", {"pods": [_fields(p) for p in pods],
                                    "containers": [_fields(c) for c in containers]})

    def create_container(self, req: api.CreateContainerRequest) -> None:
        self._write("CreateContainer", _fields(req))

    def update_container(self, req: api.UpdateContainerRequest) -> None:
        self._write("UpdateContainer", _fields(req))

    def stop_container(self, req: api.StopContainerRequest) -> None:
        self._write("StopContainer", _fields(req))

    def update_pod_sandbox(self, req: api.UpdatePodSandboxRequest) -> None:
        self._write("UpdatePodSandbox", _fields(req))

    def state_change(self, event: api.StateChangeEvent) -> None:
        fields = _fields(event)
        fields.pop("event", None)
        self._write(STATE_EVENTS[event.event][1], fields)

    def shutdown(self) -> None:
        self._write("Shutdown", {})


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m examples.logger", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", help=f"NRI socket of the runtime (default {DEFAULT_SOCKET_PATH}, or the "
                        "inherited NRI_PLUGIN_SOCKET fd when that is set)")
    parser.add_argument("--log", default="-", help="file to append JSON lines to ('-' = stderr)")
    parser.add_argument("--name", default="logger", help="plugin name (external mode)")
    parser.add_argument("--idx", default="50", help="two-digit plugin index (external mode)")
    parser.add_argument("--request-timeout-margin", type=float, default=0.3,
                        help="seconds kept in reserve before the runtime's request timeout")
    parser.add_argument("--verbose", action="store_true", help="debug logging of the stub to stderr")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        stub = Stub(EventLogger(out), name=args.name, idx=args.idx, socket_path=args.socket,
                    budget_margin=args.request_timeout_margin)
    except ValueError as exc:
        logging.getLogger("examples.logger").error("invalid setup: %s", exc)
        return 2
    return await serve(stub)


def main(argv: Sequence[str] | None = None) -> int:
    return run_example(parse_args(argv), run)


if __name__ == "__main__":
    sys.exit(main())
