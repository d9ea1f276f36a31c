"""What the core is told: NRI events (from the plugin adapter, with the I/O they need already done —
cgroup reads, device lookups), the results of its own effects (a cgroup pass written, a timer fired,
a repair sent), and the reconcile timer's findings. Each is data; `NodeCore.handle` takes one at a time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..engine.admission_engine import Engine
from ..engine.cpuset import CPUSet
from ..engine.decision import AdmissionExtras
from ..nri.gen import api_pb2 as api
from .state import Mems, Told

CgroupReads = Mapping[str, Told | None]  # cgroups path -> what its cgroup holds (None: unreadable)
Extras = AdmissionExtras  # AdmissionRequest keyword arguments from the container's devices and memory


@dataclass(frozen=True)
class Configured:
    request_timeout_ms: int


@dataclass(frozen=True)
class Synchronize:
    pods: Sequence[api.PodSandbox]
    containers: Sequence[api.Container]
    cgroups: CgroupReads = field(default_factory=dict)


@dataclass(frozen=True)
class CreateContainer:
    req: api.CreateContainerRequest
    extras: Extras = field(default_factory=Extras)  # read as for a Guaranteed container; memory dropped otherwise


@dataclass(frozen=True)
class AwaitNics:
    """A create whose pod's NIC lookup is still running (core/nic_waits.py): reply a `Park`; the wait ends
    with a `CreateNow`, after `NicsLookedUp(token)` or ``wait_seconds``, whichever comes first."""

    req: api.CreateContainerRequest
    wait_seconds: float


@dataclass(frozen=True)
class NicsLookedUp:
    """The NIC lookup the create parked under ``token`` waits for is done."""

    token: int


@dataclass(frozen=True)
class StartContainer:
    container_id: str


@dataclass(frozen=True)
class StopContainer:
    container_id: str
    exit_code: int = 0


@dataclass(frozen=True)
class RemoveContainer:
    container_id: str


@dataclass(frozen=True)
class StopPodSandbox:
    pod: api.PodSandbox


@dataclass(frozen=True)
class RemovePodSandbox:
    pod: api.PodSandbox


@dataclass(frozen=True)
class UpdateContainer:
    req: api.UpdateContainerRequest
    extras: Extras = field(default_factory=Extras)  # for a fractional -> integer resize's fresh admission
    cgroups: CgroupReads = field(default_factory=dict)  # for adopting a container Synchronize did not list
    # the wall time it reached the node thread (the edge stamps it: status shows it as the resize's "at"); None:
    # not stamped (a test handing the core an event itself): status then shows no "at", never a made-up one
    at: float | None = None


@dataclass(frozen=True)
class UpdatePodSandbox:
    req: api.UpdatePodSandboxRequest


@dataclass(frozen=True)
class ConnectionClosed:
    pass


@dataclass(frozen=True)
class ReplyDiscarded:
    """A reply the runtime never saw (answered late): undo what it decided."""

    handler: str
    container_id: str = ""


@dataclass(frozen=True)
class WriteResult:
    container_id: str
    cpus: CPUSet
    mems: Mems
    error: str = ""  # the write failed: only a reply reaches the container now
    untold: str = ""  # written, but systemd refused the scope's properties (it would put the old set back)


@dataclass(frozen=True)
class PodQuotaResult:
    pod_key: str
    name: str
    before: str = ""  # what the cgroup held, now replaced ("" = not written: it held what was wanted)
    error: str = ""  # not written (the pod's quota stays)
    untold: str = ""  # written, but systemd refused the slice's property (it would put the old quota back)
    quota: int | None = None  # the item's: a quota put back (None: a removal)


@dataclass(frozen=True)
class SliceResult:
    """A QoS slice a pass set to the shared pool (core/qos_slices.py)."""

    unit: str
    cpus: CPUSet  # the set it was asked to hold
    error: str = ""  # a cgroup write failed
    untold: str = ""  # systemd did not confirm a step (it may put another set back)


@dataclass(frozen=True)
class CgroupsWritten:
    pass_id: int
    results: Sequence[WriteResult]
    quotas: Sequence[PodQuotaResult] = ()
    slices: Sequence[SliceResult] = ()


@dataclass(frozen=True)
class TimerFired:
    name: str


@dataclass(frozen=True)
class DriftCheck:
    """The reconcile timer asks which cgroups to read (reply: a list of `DriftProbe`)."""


@dataclass(frozen=True)
class CpusetsRead:
    """What the probed cgroups hold (reply: the drifts, each parked until its repair is known)."""

    actual: Mapping[str, CPUSet]  # container id -> cpuset.cpus read


@dataclass(frozen=True)
class PodResourcesListed:
    """The kubelet's PodResources List, fetched in the background: (namespace, pod) -> the containers it
    lists (app and restartable init containers; never a regular init container). ``None``: the kubelet's
    socket is absent, the List says nothing."""

    pods: Mapping[tuple[str, str], frozenset[str]] | None


@dataclass(frozen=True)
class RuntimeRecordUpdatesReady:
    """The reconcile edge can update the runtime's records (it has a CRI client, or NRI is new enough)."""

    ready: bool = True


@dataclass(frozen=True)
class RecordResult:
    container_id: str
    path: str  # "cri" | "nri"; "" = not updated
    error: str = ""


@dataclass(frozen=True)
class RuntimeRecordsUpdated:
    """The runtime record updates of `UpdateRuntimeRecords(sync_id)` are over (core/runtime_record_updates.py)."""

    sync_id: int
    results: Sequence[RecordResult]


@dataclass(frozen=True)
class RuntimeRepaired:
    """A drift repair the reconcile edge sent through the runtime (NRI or CRI), or could not."""

    container_id: str
    generation: int  # the state generation the repair was decided at
    sent: bool


@dataclass(frozen=True)
class AwaitPass:
    """Reply True once a pass begun at the newest change has written the cgroups (False at the wait's
    limit): shutdown, and tests that look at cgroups."""


@dataclass(frozen=True)
class TopologyChanged:
    engine: Engine


Event = (Configured | Synchronize | CreateContainer | StartContainer | StopContainer | RemoveContainer
         | StopPodSandbox | RemovePodSandbox | UpdateContainer | UpdatePodSandbox | ConnectionClosed | ReplyDiscarded
         | CgroupsWritten | TimerFired | AwaitPass | DriftCheck | CpusetsRead | RuntimeRepaired | TopologyChanged
         | PodResourcesListed | RuntimeRecordUpdatesReady | RuntimeRecordsUpdated | AwaitNics | NicsLookedUp)
