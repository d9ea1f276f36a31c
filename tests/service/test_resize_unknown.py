"""Updates of containers the plugin does not know (README "Resize": containers Synchronize did not
list), through the real stub and the fake runtime, on a cgroup-v1 tree built in tmp: an adoption
over the runtime's request budget (the stub's fallback answers). The adoption rules themselves are
tested at the core: tests/core/test_core_resize_unknown.py.

containerd 1.7 never synchronizes a pre-installed plugin (modelled by the fake runtime's
``synchronize=False``), and a runtime whose CRI plugin has not loaded every container yet leaves
some out of Synchronize. containerd still relays their kubelet updates, and runc applies
containerd's stored spec -- with the create-time cpuset -- unless the reply carries ours. The
plugin adopts such a container by the rebuild rules, or at least answers with the shared pool."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from svc_harness import assignments, container, cpuset_updates, make_settings, running
from test_resize_service import BPOD, GPOD, started

from nri_pinner.core.rebuild import rebuild
from testkit.fake_runtime import CONTAINERD_2_1_9
from testkit.pod_builders import resize_request as resize

B = container(BPOD, "app", 100)
G = container(GPOD, "app", 2000, 2000)


async def test_an_unknown_container_over_budget_gets_the_shared_pool_and_is_adopted_late(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings(workdir, nri={"budget_margin_ms": 400})
    async with running(settings, CONTAINERD_2_1_9, request_timeout=1.0) as r:  # budget 0.6 s
        mine = await started(r, Path(settings.reconcile.cgroup_root), GPOD, G)
        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(1.0)  # a blocked adoption: past the budget, inside the runtime's timeout
            return rebuild(*args, **kwargs)

        monkeypatch.setattr("nri_pinner.core.resizing.rebuild", slow)
        stale = container(BPOD, "app", 100, cpus=str(r.topology.online))
        reply = await r.conn.update_container(resize(stale, BPOD, 200, 0))
        assert reply is not None and not r.conn.closed
        assert cpuset_updates(reply.update)[B.id][0] == str(r.topology.online - mine)
        async with asyncio.timeout(5):
            while B.id not in assignments(r.svc):
                await asyncio.sleep(0.01)
