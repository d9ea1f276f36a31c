"""Fixtures shared by the stub tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from stub_test_helpers import short_socket_path


@pytest.fixture
def sock_path() -> Iterator[str]:
    """A unix socket path short enough for the 108-byte limit, removed afterwards."""
    with short_socket_path() as path:
        yield path
