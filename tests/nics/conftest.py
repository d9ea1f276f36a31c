"""Fixtures for the NIC tests; the helpers live in nic_fixtures.py (conftest module names clash across
test folders)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from nic_fixtures import PodNetns


@pytest.fixture
def pod_netns() -> Iterator[PodNetns]:
    """A namespace standing in for a pod's, removed with its links after the test."""
    ns = PodNetns()
    try:
        yield ns
    finally:
        ns.close()
