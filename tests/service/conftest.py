"""Fixtures for the service tests (the harness itself is in svc_harness.py; the NIC tests' helpers in
nic_fixtures.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from nic_fixtures import PodNetns
from run_process import Run, terminate
from svc_harness import close_services


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short directory under /tmp: unix socket paths are limited to 107 bytes."""
    directory = tempfile.mkdtemp(prefix="svc-", dir="/tmp")
    yield Path(directory)
    close_services()  # checkpoint writers finish before their directory goes
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A fresh directory under /tmp for D-Bus sockets: unix socket paths are limited to 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="dbus-", dir="/tmp") as d:
        yield Path(d)


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    """`nri-pinner run` processes a test started: ended at teardown whatever the test did."""
    started: list[Run] = []
    yield started
    for run in started:
        terminate(run)


@pytest.fixture
def pod_netns() -> Iterator[PodNetns]:
    """A namespace standing in for a pod's, removed with its links after the test."""
    ns = PodNetns()
    try:
        yield ns
    finally:
        ns.close()
