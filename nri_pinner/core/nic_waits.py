"""Creates waiting for their pod's NIC lookup (docs/alignment.md "NIC alignment"; edge/nic_lookup/lookup.py).

The NIC hint provider reads a pod's NICs when it admits a container, and the lookup of a new pod's NICs
runs in the background. A create whose pod's lookup is still running (`AwaitNics`) is parked, never a
blocked node thread, until the lookup is done (`NicsLookedUp`) or the wait's limit has passed (the timer
``nic:<token>``), whichever comes first; the other is then moot. Either way the wait is over with a
`CreateNow`: the edge reads the create's extras then (a PodResources List may have come meanwhile) and
hands the core the `CreateContainer`, whose reply answers the parked one. At the limit the create goes on
without NIC hints (``late``).
"""

from __future__ import annotations

from ..nri.gen import api_pb2 as api
from .context import CoreContext
from .effects import ArmTimer, CreateNow, Park
from .events import AwaitNics

TIMER = "nic:"  # + the parked create's token


class NicWaits:
    def __init__(self, core: CoreContext) -> None:
        self.core = core
        self.waiting: dict[int, api.CreateContainerRequest] = {}  # parked token -> the create

    def park(self, event: AwaitNics) -> Park:
        """Park the create until its pod's lookup is done, at most ``event.wait_seconds``."""
        token = self.core.passes.new_token()  # the core's one token space: the edge keys parked replies by it
        self.waiting[token] = event.req
        self.core.emit(ArmTimer(f"{TIMER}{token}", event.wait_seconds))
        return Park(token)

    def looked_up(self, token: int) -> None:
        """The pod's lookup is done: the create goes on with its NIC hints (unless its wait is over already)."""
        self._over(token, late=False)

    def timer(self, name: str) -> None:
        """The wait's limit: the create goes on without NIC hints (unless its lookup came first)."""
        self._over(int(name[len(TIMER):]), late=True)

    def _over(self, token: int, late: bool) -> None:
        req = self.waiting.pop(token, None)
        if req is not None:
            self.core.emit(CreateNow(token, req, late))
