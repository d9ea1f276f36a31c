"""Packaging tests: register the `slow` marker; make the e2e harness importable as pytest imports it
(package `e2e` under tests/, see test_image_e2e.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS_DIR = str(Path(__file__).resolve().parents[1])
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: builds the .deb / a debootstrap root (root only; minutes on first run)")
