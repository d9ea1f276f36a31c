"""What the core asks the edge to do, as data: write cgroups, checkpoint a body, arm a timer, answer a
parked reply. The plugin adapter (`edge/plugin.py`) carries them out; results come back as events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..engine.cpuset import CPUSet
from ..engine.topologymanager.explain import HintSummaries, settle_all
from ..nri.gen import api_pb2 as api
from .checkpoint import Snapshot
from .state import Mems, Told

if TYPE_CHECKING:
    from .context import Reply


@dataclass(frozen=True)
class PassItem:
    container_id: str
    cgroups_path: str
    cpus: CPUSet
    mems: Mems
    known: Told | None  # what the cgroup is known to hold (None: unknown)


@dataclass(frozen=True)
class PodQuotaItem:
    """A pod cgroup whose CFS quota a pass removes, or puts back (``quota``: a pod demoted for pod-level
    resources, core/quotas.py)."""

    pod_key: str
    cgroup: str  # NRI's spelling: cgroupfs "/kubepods/pod<uid>", systemd "kubepods-pod<uid>.slice"
    name: str  # "<namespace>/<pod>", for the logs
    quota: int | None = None  # µs per period to write back (None: remove the quota)
    period: int = 0  # µs, with ``quota``: cgroup v2 `cpu.max` "<quota> <period>"


@dataclass(frozen=True)
class SliceItem:
    """A QoS slice that holds the shared pool for the shared containers below it (core/qos_slices.py):
    systemd told and the cgroup written, narrowing before the pass's items and widening after them; then
    its `children`, whose own cgroups get the wide set (`PassItem.cpus`) when the slice is confirmed to
    hold no more than the pool, else the pool itself (`cpus`: the per-scope fallback)."""

    unit: str  # kubepods-burstable.slice
    path: str  # its cgroup, below the hierarchy's root: /kubepods.slice/kubepods-burstable.slice
    cpus: CPUSet  # the shared pool
    known: CPUSet | None  # what systemd and the cgroup were last confirmed to hold (None: unknown)
    children: tuple[PassItem, ...]  # every started shared container below it (the fallback needs them all)


@dataclass(frozen=True)
class WriteCgroups:
    """One pass: write these cgroups in this order (narrowing first), tell systemd first; reply with
    `CgroupsWritten(pass_id, ...)`. ``urgent``: a reply waits for it (run it at normal priority).
    ``quotas``: pod cgroups to leave without a CFS quota (or to give theirs back), after the cpusets.
    ``slices``: QoS slices holding the pool, and the containers below them (`SliceItem`)."""

    pass_id: int
    items: tuple[PassItem, ...]
    live: tuple[str, ...]  # cgroups paths of every started container (close the others' files)
    urgent: bool
    quotas: tuple[PodQuotaItem, ...] = ()
    slices: tuple[SliceItem, ...] = ()


@dataclass(frozen=True)
class Expedite:
    """A reply now waits for pass ``pass_id``, sent as a background one: run it at normal priority if
    the background thread has not begun it."""

    pass_id: int


@dataclass(frozen=True)
class WriteCheckpoint:
    snapshot: Snapshot


@dataclass(frozen=True)
class ArmTimer:
    """Deliver `TimerFired(name)` after ``seconds`` (arming a name again replaces it)."""

    name: str
    seconds: float


@dataclass(frozen=True)
class RecordItem:
    container_id: str
    name: str
    cpus: CPUSet
    mems: Mems


@dataclass(frozen=True)
class UpdateRuntimeRecords:
    """Update the runtime's own record of these containers to these cpusets (one at a time), then reply
    with `RuntimeRecordsUpdated(sync_id, ...)`. The runtime asks us (UpdateContainer) on the CRI path."""

    sync_id: int
    items: tuple[RecordItem, ...]


@dataclass(frozen=True)
class SettleWhenIdle:
    """Format these decisions' hint summaries on the node thread once it is idle (never before a reply
    goes out): until then each keeps its providers' answers."""

    summaries: tuple[HintSummaries, ...]

    def settle(self) -> None:
        settle_all(self.summaries)


@dataclass(frozen=True)
class ListPodResources:
    """Ask the PodResources fetcher for a new List (its answer comes back as `PodResourcesListed`)."""


@dataclass(frozen=True)
class CreateNow:
    """The NIC wait of the create parked under ``token`` is over (core/nic_waits.py): read its extras and
    hand the core `CreateContainer(req, extras)`; that reply answers the parked one. ``late``: the wait's
    limit passed first, the create goes on without NIC hints (noted unless the lookup has finished since)."""

    token: int
    req: api.CreateContainerRequest
    late: bool


@dataclass(frozen=True)
class Resolve:
    """Answer the reply parked under ``token`` (a `Park` the core returned earlier)."""

    token: int
    reply: Reply


# the counters the core bumps (the edge's Prometheus counters of these names, edge/observe/metrics.py);
# "rejected" is one refused admission, counted by reason and by the provider that refused
CounterName = Literal["pinning_requests", "rejected", "fail_open", "bad_input", "late_replies", "resizes",
                      "provider_admissions", "provider_rejections"]


@dataclass(frozen=True)
class Count:
    """Add one to counter ``counter`` of the series ``labels`` (the core calls no metrics object)."""

    counter: CounterName
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Timed:
    """The event was a decision the edge times (the core reads no clock): it measures the core's `handle`
    for the event and reports the seconds — observed in histogram ``histogram`` (an admission), and/or
    logged at info as ``message`` with ``fields`` and ``decision_ms`` (an applied resize)."""

    histogram: Literal["allocation_seconds", ""] = ""
    message: str = ""
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Refusal:
    """The request is refused with this message (the adapter fails the NRI call)."""

    message: str
    kind: str = "admission"  # "admission" | "resize"


@dataclass(frozen=True)
class Park:
    """The reply waits: it comes later as `Resolve(token, reply)`."""

    token: int


Effect = (WriteCgroups | Expedite | WriteCheckpoint | ArmTimer | ListPodResources | UpdateRuntimeRecords | Resolve
          | SettleWhenIdle | Count | Timed | CreateNow)
