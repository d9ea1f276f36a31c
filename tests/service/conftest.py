"""Fixtures for the service tests (the harness itself is in svc_harness.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
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
