"""The plugin's side of a NIC lookup, run as a script in a process of its own (with fewer privileges than
the test): ``python nic_lookup_probe.py NETNS SOCKET SYSFS_ROOT``. Prints one JSON object:

- ``caps``: this process's effective capability mask;
- ``direct``: the lookup done here, by setns on a thread of its own ("ok: N links" or why not);
- ``service``: `NetnsReader` with the lookup service at SOCKET (the links, or the error);
- ``no_service``: `NetnsReader` with no service listening (the links, or the error: the hint);
- ``lookup``: a `NicLookup` made as the plugin makes it (its socket from $NRI_PINNER_NIC_LOOKUP_SOCKET)
  waiting for one sandbox, as a create does: the result's links or problem, and how long it waited.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from nri_pinner.edge.nic_lookup.client import NetnsReader
from nri_pinner.edge.nic_lookup.lookup import NicLookup
from nri_pinner.edge.nic_lookup.netns import NicLink, read_links
from nri_pinner.nri.gen import api_pb2 as api


def caps() -> str:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(ln for ln in f if ln.startswith("CapEff:")).split()[1]


def links(found: tuple[NicLink, ...]) -> list[dict[str, Any]]:
    return [x.to_json() for x in found]


def attempt(fn: Any) -> Any:
    box: dict[str, Any] = {}

    def run() -> None:  # on a thread of its own, as NicLookup runs its reader: setns moves only it
        try:
            box["value"] = fn()
        except Exception as exc:
            box["value"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return box["value"]


def main() -> None:
    netns, sock, root = sys.argv[1:4]
    out: dict[str, Any] = {"caps": caps()}
    direct = attempt(lambda: read_links(netns, root))
    out["direct"] = f"ok: {len(direct)} links" if isinstance(direct, tuple) else direct
    service = attempt(lambda: NetnsReader(sock)(netns, root, None))
    out["service"] = links(service) if isinstance(service, tuple) else service
    alone = attempt(lambda: NetnsReader(sock + ".none")(netns, root, None))
    out["no_service"] = links(alone) if isinstance(alone, tuple) else alone
    pod = api.PodSandbox(id="probe", uid="uid-probe", name="probe")
    pod.linux.namespaces.add(type="network", path=netns)
    began = time.monotonic()
    found = NicLookup(root).wait(pod)  # LOOKUP_WAIT_SECONDS, as a create waits
    out["lookup"] = {"waited": time.monotonic() - began, "links": links(found.links) if found else None,
                     "problem": found.problem if found else None}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
