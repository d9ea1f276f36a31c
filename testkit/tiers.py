"""Test tiers (tests/README.md): what each tests/ folder needs, as one pytest marker per tier.

A test's tier is its folder's (FOLDER_TIERS), unless the test carries a tier marker of its own
(``pytestmark = pytest.mark.e2e`` in a module of another folder): that one wins. Two tier markers on one
test are an error, and so is a tests/ folder with no tier. The packaging builds run only when asked for:
under ``-m EXPR`` they are deselected unless EXPR names ``packaging``; a plain run (no ``-m``) runs them.
The root conftest.py applies this at collection; tests/layout checks the table against the folders.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePath

TIERS = ("inprocess", "service", "e2e", "vm", "packaging")

# Folder under tests/ → tier. Helper-only folders (fixtures/) hold no test files and need none.
FOLDER_TIERS = {
    "config": "inprocess",
    "core": "inprocess",
    "docs": "inprocess",
    "engine": "inprocess",
    "layout": "inprocess",
    "service": "service",
    "nri": "service",
    "deploy": "service",
    "e2e": "e2e",
    "vm": "vm",
    "vm_guest": "vm",
    "packaging": "packaging",
}

# Tiers an ``-m`` expression selects only by naming them (a plain run, no -m, selects them too).
OPT_IN_TIERS = ("packaging",)


class TierError(Exception):
    """A test with no tier, or with more than one."""


def folder_of(path: PurePath, root: PurePath) -> str | None:
    """The tests/ folder a test file lives in (None outside tests/<folder>/)."""
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return None
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else None


def tier_of(folder: str | None, own_markers: Iterable[str], where: str) -> tuple[str, bool]:
    """The test's tier, and whether it comes from its folder (so the marker is still to be added).
    ``own_markers`` are the names of the markers the test carries (module, class and function)."""
    own = sorted({name for name in own_markers if name in TIERS})
    if len(own) > 1:
        raise TierError(f"{where}: more than one tier marker ({', '.join(own)}); a test has exactly one")
    if own:
        return own[0], False
    if folder is None or folder not in FOLDER_TIERS:
        raise TierError(f"{where}: tests/{folder or '?'} has no tier (testkit/tiers.py FOLDER_TIERS)")
    return FOLDER_TIERS[folder], True


def opted_out(tier: str, markexpr: str) -> bool:
    """True when an opt-in tier is left out: ``-m`` given and not naming it."""
    return tier in OPT_IN_TIERS and bool(markexpr.strip()) and re.search(rf"\b{tier}\b", markexpr) is None
