"""What containers/nri-plugins' resource annotator puts on a pod: `noderesource.dev/resources`, each
container's spec.resources as written (quantities as strings). A model of that webhook for the tests
that feed nri-pinner a container's own requests (core/own_requests.py)."""

from __future__ import annotations

import json
from typing import Any

from . import kubelet_model as km
from . import kubelet_pod as kp

ANNOTATION = "noderesource.dev/resources"


def container_spec(r: km.ContainerResources) -> dict[str, Any]:
    """One container's requests and limits, what it leaves out left out."""
    out: dict[str, dict[str, str]] = {"requests": {}, "limits": {}}
    for kind, cpu, mem in (("requests", r.cpu_milli_request, r.memory_request),
                           ("limits", r.cpu_milli_limit, r.memory_limit)):
        out[kind].update({"cpu": f"{cpu}m"} if cpu else {})
        out[kind].update({"memory": str(mem)} if mem else {})
    return {k: v for k, v in out.items() if v}


def pod_annotations(*containers: kp.Container, init: tuple[kp.Container, ...] = ()) -> dict[str, str]:
    doc = {"containers": {c.name: container_spec(c.resources) for c in containers}}
    if init:
        doc["initContainers"] = {c.name: container_spec(c.resources) for c in init}
    return {ANNOTATION: json.dumps(doc)}
