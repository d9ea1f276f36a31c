"""Hypothesis profiles for every test root: CI runs a fixed (derandomized) set of examples so the
README's test command gives the same answer on every clone; HYPOTHESIS_PROFILE=explore draws new
random examples (run it to hunt for bugs, then pin what it finds as a unit test)."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
