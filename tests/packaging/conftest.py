"""Packaging builds: make the e2e harness importable as pytest imports it (package `e2e` under tests/,
see test_image_e2e.py), and tests/deploy's k8s_manifests.py (the image tests render the DaemonSet with it;
mypy finds it through pyproject's mypy_path)."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]
for path in (str(TESTS_DIR), str(TESTS_DIR / "deploy")):
    if path not in sys.path:
        sys.path.insert(0, path)
