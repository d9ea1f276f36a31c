"""The inspection socket's file is known as ours before it takes its path: an instance that replaces the
path right after (one without the lock) is never mistaken for this one, so exit leaves its socket
(test_run_process.py::test_exit_leaves_a_socket_file_it_does_not_own raced this under load)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from nri_pinner.edge.observe.status_server import start_server


def test_the_socket_file_is_identified_before_it_takes_the_path(tmp_path: Path) -> None:
    path = tmp_path / "inspect.sock"
    seen: list[tuple[bool, os.stat_result]] = []

    async def go() -> None:
        server = await start_server(str(path), dict, on_bound=lambda st: seen.append((path.exists(), st)))
        try:
            [(published, st)] = seen
            assert not published  # told before anyone could see (and replace) the path
            now = path.stat()
            assert (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)  # the very file that took the path
        finally:
            await server.stop(0.5)

    asyncio.run(go())
