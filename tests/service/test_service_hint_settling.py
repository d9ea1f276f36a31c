"""Through the service, the real stub and its node thread: an admission's hint summaries, left
unformatted while the reply goes out, are formatted once the node thread is idle, with no status
read (they would otherwise keep every provider's answers for the container's life)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from svc_harness import container, create, make_settings, pod, running


async def test_summaries_are_formatted_when_the_node_thread_is_idle(workdir: Path) -> None:
    settings = make_settings(workdir, topology_manager={"policy": "best-effort"})
    async with running(settings) as r:
        gold = pod("gold")
        c = container(gold, "app", 2000, 2000)
        await r.conn.create_container(create(gold, c))
        summaries = r.svc.plugin.view().containers[c.id].hints["provider_hints"]
        for _ in range(100):  # the node thread's idle delay is 50 ms
            if summaries.settled:
                break
            await asyncio.sleep(0.05)
        assert summaries.settled
        assert dict(summaries)["cpu"]["cpu"].startswith("{")
