"""Whether a container's OWN data proves it Guaranteed-equivalent, for the kubelet 1.36 alpha gate
`PodLevelResourceManagers` in container scope (setting `topology_manager.pod_level_resource_managers`).

The kubelet's rule (kubernetes/kubernetes, the copies read in the source index; README "Pod-level
resource managers" lists them): in a Guaranteed pod that sets `spec.resources`, with the gate on, a
container gets exclusive CPUs only when `cm/qos.IsContainerEquivalentQOSGuaranteed` holds — its own
CPU and memory requests non-zero and equal to its own limits (pkg/kubelet/cm/qos/helpers.go:27-43 at
5d7e2a39) — and its CPU request is whole (cpumanager/policy_static.go `guaranteedCPUs` at 62c7eac0);
its memory comes from the Memory Manager under the same test (memorymanager/policy_static.go
`getContainerRequestedResources` at 030880a5). Everyone else stays on the node's shared pool.

What the runtime sees cannot prove it alone: a container without its own CPU (memory) limit is given
the pod's as quota (memory limit), and shares from that limit without a CPU request of its own
(kuberuntime_container_linux.go:100-125, :256-257 in v1.32.10), and no memory request reaches the
runtime at all (CRI LinuxContainerResources has none; `memory.min` only under the alpha MemoryQoS).
So the proof must come from data that names the container's own spec (never over-allocate):
* `noderesource.dev/resources` (the resource annotator's copy of the spec): CPU request = limit,
  whole; memory request = limit, non-zero (a left-out request is its limit, as API defaulting makes
  it), and the cgroup values agree (its shares/quota, intent._agrees, and its memory limit);
* the pod annotation `nri-pinner.io/cpu.<container>` with request = limit, whole: the CPU quota (if
  any) must be that limit, and its memory limit must be its own — below the pod's. The memory
  request stays unseen: the annotation vouches that it equals the limit (README).
"""

from __future__ import annotations

import re
from typing import Any

_MEMORY = re.compile(r"([0-9]{1,19})(?:\.([0-9]{1,9}))?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?", re.ASCII)
_UNIT: dict[str | None, int] = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
         "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}


def memory_bytes(value: Any) -> int:
    """A memory quantity (e.g. "2Gi", "512M", 1073741824) in bytes, rounded up as Quantity.Value();
    0 when absent or not read here (exponents, milli): then it proves nothing."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return 0
    m = _MEMORY.fullmatch(str(value).strip())
    if m is None:
        return 0
    whole, fraction, unit = m.groups()
    scale: int = _UNIT[unit]
    frac: str = fraction or ""
    denominator: int = 10 ** len(frac)
    return int(whole) * scale - (-int(frac or "0") * scale // denominator)  # the fraction rounded up


def own_cpus(source: str, request: int, limit: int, *, memory_request: int, memory_limit: int,
             cgroup_memory: int, pod_memory: int, quota_milli: int) -> int:
    """The whole CPUs (millicores) the gated kubelet gives the container in container scope, when its
    own data proves IsContainerEquivalentQOSGuaranteed; 0 otherwise. ``source``: where request/limit
    came from (intent.py: "noderesource" only when they agree with the cgroup, "annotation")."""
    if request <= 0 or request != limit or request % 1000:
        return 0
    if source == "noderesource":
        ok = memory_request == memory_limit > 0 and cgroup_memory == memory_limit
    elif source == "annotation":
        ok = (quota_milli == 0 or abs(quota_milli - limit) <= 1) and 0 < cgroup_memory < pod_memory
    else:  # the cgroup values alone: the memory request is never sent
        ok = False
    return request if ok else 0
