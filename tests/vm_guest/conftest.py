"""Guest-only scenarios: run inside the VM tier's guest by tests/vm/parts/30-plugin-scenarios, which
sets NRI_PINNER_IN_VM=1 (a node with systemd as PID 1, cgroup v2 and several NUMA nodes). Anywhere else
they skip: the host's pytest collects this folder too.

The private containerd per runtime is tests/e2e's (same fixtures, same driver and timeout settings
from tests/e2e/node_env.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.conftest import containerd, containerd_session  # noqa: F401  (fixtures used here)

IN_VM = os.environ.get("NRI_PINNER_IN_VM") == "1"
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if IN_VM:
        return
    skip = pytest.mark.skip(reason="guest-only: runs in the VM tier's guest (part 30-plugin-scenarios sets "
                                   "NRI_PINNER_IN_VM=1)")
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(skip)
