"""Deploy checks (what ships and how it installs, no build): make the e2e harness importable as pytest
imports it (package `e2e` under tests/, see test_enable_nri.py)."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS_DIR = str(Path(__file__).resolve().parents[1])
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)
