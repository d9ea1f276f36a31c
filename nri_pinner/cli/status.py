"""`nri-pinner status`: a table of assignments and a CPU map, from the running plugin.

Exit status: 0 connected to the runtime, 2 the plugin cannot be reached, 3 the plugin answers but is
not connected to the runtime (containers are created without its cpusets meanwhile).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import grpc

from ..config import ConfigError, load_file
from ..engine.topology.model import Topology
from ..engine.topology.view import render_topology

NOT_CONNECTED = 3


def status(socket: str | None, config_path: str, as_json: bool = False) -> int:
    if socket is None:
        try:
            socket = load_file(config_path).inspect.socket
        except ConfigError:
            from ..config import InspectSettings

            socket = InspectSettings().socket
    from ..edge.observe.status_server import query

    try:
        doc = query(socket)
    except grpc.RpcError as exc:
        print(f"nri-pinner status: cannot reach the plugin at {socket}: {_rpc_error(exc)}", file=sys.stderr)
        return NOT_CONNECTED  # unreachable is "not connected" too (documented exit status 3)
    if as_json:
        json.dump(doc, sys.stdout, indent=1)
        print()
    else:
        print(render_status(doc))
    if not doc.get("health", {}).get("connected"):
        print("nri-pinner status: the plugin is running but not connected to the runtime's NRI socket",
              file=sys.stderr)
        return NOT_CONNECTED
    return 0


def _rpc_error(exc: grpc.RpcError) -> str:
    """One line: str() of a grpc error is a multi-line dump."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    text = f"{code().name}: {details()}" if callable(code) and callable(details) else str(exc)
    return " ".join(text.split())


def _numa(nodes: Any) -> str:
    return "any" if nodes is None else "{" + ",".join(map(str, nodes)) + "}"


def render_status(doc: dict[str, Any]) -> str:
    h, pools = doc["health"], doc["pools"]
    lines = [
        f"runtime: {h.get('runtime_name') or '-'} {h.get('runtime_version') or '-'} "
        f"(NRI {h.get('runtime_nri_version', '?')}), plugin {h.get('plugin', '?')} {h.get('version', '')} "
        f"{h.get('mode', '')}, "
        f"connected={h.get('connected')} synchronized={h.get('synchronized')}",
        f"topology manager: {doc['policy']['topology_manager']} ({doc['policy']['scope']} scope); "
        f"reconcile repairs: {h.get('reconcile_repairs', 0)}",
        "pools: " + "  ".join(f"{k}={v or '-'}" for k, v in pools.items()),
        "",
    ]
    header = ("NAMESPACE", "POD", "CONTAINER", "QOS", "MODE", "CPUS", "MEMS")
    rows = [header] + [
        (a["namespace"], a["pod"], a["container"], a["qos"],
         "exclusive" if a["exclusive"] else ("stopped" if a["stopped"] else "shared"), a["cpus"] or "-",
         a["mems"] or "-")
        for a in doc["assignments"]
    ]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(header))]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    owners: dict[int, str] = {}
    from ..engine.cpuset import CPUSet

    for a in doc["assignments"]:
        if a["exclusive"] and not a["stopped"]:
            for cpu in CPUSet.parse(a["cpus"]):
                owners[cpu] = f"{a['pod']}/{a['container']}"
    lines += ["", render_topology(Topology.from_json(doc["topology"]), owners)]
    hinted = [a for a in doc["assignments"] if a.get("hints")]
    if hinted:
        lines += ["", "topology hints (~ = not preferred):"]
        for a in hinted:
            merged = a["hints"].get("merged") or {}
            parts = [f"merged {_numa(merged.get('numa'))}{'' if merged.get('preferred', True) else '~'}"]
            for provider, by_resource in a["hints"].get("provider_hints", {}).items():
                parts += [f"{provider}[{r}] {text}" if r != provider else f"{provider} {text}"
                          for r, text in by_resource.items()]
            lines.append(f"  {a['pod']}/{a['container']}: " + " | ".join(parts))
    resized = [a for a in doc["assignments"] if a.get("resize")]
    if resized:  # the newest in-place resize per container; the admitted set is the shrink floor
        lines += ["", "last resize (admitted = baseline):"]
        for a in resized:
            r = a["resize"]
            why = f" {r['reason']}: {r['message']}" if r.get("reason") else ""
            lines.append(f"  {a['pod']}/{a['container']}: {r['outcome']} {r['before']} -> {r['after']} "
                         f"(admitted {a['admitted'] or '-'}, {r['request_milli']}m/{r['limit_milli']}m){why}")
    rejected = [d for d in doc["decisions"] if d.get("outcome") in ("rejected", "fail-open")]
    if rejected:
        lines += ["", "recent rejections:"]
        lines += [f"  {d['namespace']}/{d['pod_name']}/{d['container']}: {d.get('reason')}: {d.get('message')}"
                  for d in rejected[-10:]]
    if doc.get("nics"):
        lines += ["", "pod NICs (NUMA hints):"]
        for n in doc["nics"]:
            if n.get("pending"):
                lines.append(f"  sandbox {n['sandbox_id'][:12]}: lookup running")
                continue
            links = ", ".join(f"{x['name']}={x['pci'] or x['kind']}@{'-' if x['numa'] is None else x['numa']}"
                              for x in n["links"]) or "-"
            lines.append(f"  {n['pod']} ({n['netns']}): {links}; hints {' '.join(n['hints']) or 'none'}"
                         + (f"; {n['problem']}" if n["problem"] else ""))
    if pr := doc.get("podresources"):
        state = {None: "not asked yet", False: "socket absent", True: "connected"}[pr["available"]]
        when = time.strftime("%H:%M:%S", time.localtime(pr["listed_at"])) if pr["listed_at"] else "never"
        held = ", ".join(f"{r}={n}" for r, n in pr["allocatable"].items()) or "-"
        lines += ["", f"kubelet PodResources ({pr['socket']}): {state}; last List {when}, {pr['pods']} pods; "
                      f"allocatable {held}"]
    return "\n".join(lines)
