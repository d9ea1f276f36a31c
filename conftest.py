"""Hypothesis profiles for every test root: CI runs a fixed (derandomized) set of examples so the
README's test command gives the same answer on every clone; HYPOTHESIS_PROFILE=explore draws new
random examples (run it to hunt for bugs, then pin what it finds as a unit test).

Every test gets one tier marker here (testkit/tiers.py, tests/README.md)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from testkit.tiers import TierError, folder_of, opted_out, tier_of

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One tier marker per test (testkit/tiers.py, tests/README.md); the opt-in packaging builds leave
    a run whose -m does not name them."""
    markexpr = str(config.getoption("markexpr", "") or "")
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    errors: list[str] = []
    for item in items:
        try:
            tier, from_folder = tier_of(folder_of(item.path, config.rootpath),
                                        (mark.name for mark in item.iter_markers()), item.nodeid)
        except TierError as exc:
            errors.append(str(exc))
            continue
        if from_folder:
            item.add_marker(tier)
        (dropped if opted_out(tier, markexpr) else kept).append(item)
    if errors:
        raise pytest.UsageError("test tiers:\n" + "\n".join(errors[:20]))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
