"""What the core needs read for an NRI UpdateContainer before it sees it: the edge asks (`update_needs`)
and reads only that, on the node thread, before it hands the core the event.

- The container's devices (`Intake.extras`: sysfs and PodResources) only for a kubelet resize of a
  container that holds no exclusive CPUs, or is not known yet: a fractional -> integer resize is admitted
  afresh with them (`resizing._like`); a grow of an exclusive one stays inside its admitted affinity, and
  a cpuset-only update admits nothing. Read for every update instead, a cpuset-only update (ours coming
  back from a record sync: docs/design/pool-changes.md "Our updates and the kubelet's") would pay for
  device lookups it never uses.
- The container's cgroup only for a container Synchronize did not list that the update may adopt
  (`resizing._adopt`: its cgroup's cpuset is trusted over the runtime's stale record).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..nri.gen import api_pb2 as api
from .resizing import adoptable, is_resize
from .state import NodeState


@dataclass(frozen=True)
class UpdateNeeds:
    extras: bool  # the container's devices (`UpdateContainer.extras`)
    cgroup: str  # the cgroups path to read (`UpdateContainer.cgroups`); "" = none


def update_needs(node: NodeState, req: api.UpdateContainerRequest) -> UpdateNeeds:
    """What the update ``req`` needs read, given the node the core holds now (it is handed the event next)."""
    resize = is_resize(req.linux_resources.cpu)
    t = node.containers.get(req.container.id)
    if t is None:  # unknown: adopted on this update when it can be, then placed like any other
        return UpdateNeeds(resize, req.container.linux.cgroups_path if adoptable(req) else "")
    a = node.assignment(t)
    return UpdateNeeds(resize and (a is None or not a.exclusive), "")
