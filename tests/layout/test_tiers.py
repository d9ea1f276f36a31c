"""Test tiers (tests/README.md, testkit/tiers.py): every tests/ folder holding tests has one tier, no test
carries two tier markers, and a test using tests/e2e's containerd fixtures is in a tier that has one."""

from __future__ import annotations

import ast
from pathlib import Path, PurePath

import pytest

from testkit.tiers import FOLDER_TIERS, TIERS, TierError, folder_of, opted_out, tier_of

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


def _test_folders() -> set[str]:
    return {path.relative_to(TESTS).parts[0] for path in TESTS.rglob("test_*.py")
            if "gen" not in path.relative_to(TESTS).parts}


def _tier_marks(node: ast.AST) -> set[str]:
    """Tier names in ``pytest.mark.<tier>`` expressions under ``node``."""
    return {sub.attr for sub in ast.walk(node)
            if isinstance(sub, ast.Attribute) and sub.attr in TIERS
            and isinstance(sub.value, ast.Attribute) and sub.value.attr == "mark"}


def test_every_test_folder_has_a_tier() -> None:
    folders = _test_folders()
    assert not folders - FOLDER_TIERS.keys(), "tests/ folders with no tier in testkit/tiers.py FOLDER_TIERS"
    assert not FOLDER_TIERS.keys() - folders, "FOLDER_TIERS names folders that hold no tests"
    assert set(FOLDER_TIERS.values()) == set(TIERS)


def test_no_test_carries_two_tier_markers() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        module_marks: set[str] = set()
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                    for t in stmt.targets):
                module_marks |= _tier_marks(stmt.value)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                marks = module_marks | set().union(*(_tier_marks(d) for d in node.decorator_list))
                if len(marks) > 1:
                    offenders.append(f"{path.relative_to(REPO)}::{node.name}: {sorted(marks)}")
        if len(module_marks) > 1:
            offenders.append(f"{path.relative_to(REPO)}: pytestmark {sorted(module_marks)}")
    assert not offenders


def test_tests_on_the_e2e_containerd_are_in_a_tier_that_has_one() -> None:
    # tests/e2e's `containerd` fixture starts a real containerd: a test elsewhere using it marks itself e2e
    # (tests/packaging's image tests) or lives in a folder whose tier provides one (vm_guest: the guest).
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        folder = path.relative_to(TESTS).parts[0]
        text = path.read_text()
        if folder == "e2e" or "e2e.conftest import" not in text:
            continue
        if FOLDER_TIERS.get(folder) not in ("e2e", "vm") and "pytest.mark.e2e" not in text:
            offenders.append(str(path.relative_to(REPO)))
    assert not offenders


def test_a_tier_marker_of_its_own_wins_over_the_folders() -> None:
    assert tier_of("packaging", ["skipif", "e2e", "slow"], "t") == ("e2e", False)
    assert tier_of("service", ["parametrize"], "t") == ("service", True)


@pytest.mark.parametrize(("folder", "marks"), [("service", ["e2e", "vm"]), ("nowhere", []), (None, [])])
def test_two_tiers_or_none_are_refused(folder: str | None, marks: list[str]) -> None:
    with pytest.raises(TierError):
        tier_of(folder, marks, "t")


def test_folder_of_a_test_file() -> None:
    root = PurePath("/repo")
    assert folder_of(PurePath("/repo/tests/engine/test_x.py"), root) == "engine"
    assert folder_of(PurePath("/repo/tests/test_x.py"), root) is None
    assert folder_of(PurePath("/elsewhere/test_x.py"), root) is None


@pytest.mark.parametrize(("markexpr", "left_out"), [
    ("", False), ("not e2e and not vm", True), ("packaging", False), ("not packaging", False),
    ("service or packaging", False), ("e2e", True), ("packaging_x", True),
])
def test_packaging_builds_run_only_when_asked_for(markexpr: str, left_out: bool) -> None:
    assert opted_out("packaging", markexpr) is left_out
    assert not opted_out("service", markexpr)
