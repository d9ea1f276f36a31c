"""docs/kubelet-compatibility.md (and the README and the other docs) cite this repository's tests as
`tests/<file>.py::<name>`. Each citation must name a test function that exists in that file, so a test
renamed or removed cannot stay cited; the compatibility doc's other repository paths (`nri_pinner/...`,
`protos/...:<line>`) must exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from markdown_docs import split_fences

REPO = Path(__file__).resolve().parents[2]
COMPAT = "docs/kubelet-compatibility.md"
DOCS = sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))
CITED_IN = (COMPAT, "README.md", *(d for d in DOCS if d != COMPAT))
TEST_CITATION = re.compile(r"\b(tests/[\w./-]+\.py)::(\w+(?:::\w+)?)")
REPO_PATH = re.compile(r"`((?:nri_pinner|protos|tests)/[\w./-]+?)(?::(\d+))?`")


def defined_tests(source: str) -> set[str]:
    """Module-level test functions (`name`) and test methods of test classes (`Class::name`)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names.update(f"{node.name}::{item.name}" for item in node.body
                         if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"))
    return names


def wrong_test_citations(text: str, root: Path) -> list[str]:
    """Every `tests/...py::name` in `text` that names no test of that file under `root`."""
    problems = []
    for path, name in sorted(set(TEST_CITATION.findall(text))):
        file = root / path
        if not file.is_file():
            problems.append(f"{path}::{name}: no such file")
        elif name not in defined_tests(file.read_text()):
            problems.append(f"{path}::{name}: no such test in that file")
    return problems


def wrong_paths(text: str, root: Path) -> list[str]:
    """Every backticked repository path (with an optional `:line`) in `text` that does not exist."""
    problems = []
    for path, line in sorted(set(REPO_PATH.findall(text))):
        file = root / path
        if not file.exists():
            problems.append(f"{path}: no such file")
        elif line and int(line) > len(file.read_text().splitlines()):
            problems.append(f"{path}:{line}: the file is shorter")
    return problems


@pytest.mark.parametrize("doc", CITED_IN)
def test_every_cited_test_exists(doc: str) -> None:
    outside_fences = "\n".join(line for _, line in split_fences((REPO / doc).read_text())[1])  # blocks: examples
    assert wrong_test_citations(outside_fences, REPO) == []


def test_the_compatibility_doc_cites_tests_and_real_paths() -> None:
    text = (REPO / COMPAT).read_text()
    assert len(set(TEST_CITATION.findall(text))) >= 30  # every behaviour row cites tests
    assert wrong_paths(text, REPO) == []


def test_the_readme_links_the_compatibility_doc() -> None:
    assert f"]({COMPAT})" in (REPO / "README.md").read_text()


def test_a_renamed_or_missing_test_is_reported(tmp_path: Path) -> None:
    (tmp_path / "tests" / "core").mkdir(parents=True)
    (tmp_path / "tests" / "core" / "test_x.py").write_text(
        "def test_kept() -> None: ...\n\nasync def test_async() -> None: ...\n\ndef helper() -> None: ...\n\n"
        "class TestGroup:\n    def test_inner(self) -> None: ...\n")
    text = ("`tests/core/test_x.py::test_kept`, tests/core/test_x.py::test_async, "
            "`tests/core/test_x.py::TestGroup::test_inner`, `tests/core/test_x.py::test_renamed`, "
            "`tests/core/test_x.py::helper`, `tests/core/test_gone.py::test_kept`")
    assert wrong_test_citations(text, tmp_path) == [
        "tests/core/test_gone.py::test_kept: no such file",
        "tests/core/test_x.py::helper: no such test in that file",
        "tests/core/test_x.py::test_renamed: no such test in that file",
    ]
    assert wrong_paths("`tests/core/test_x.py:3` `tests/core/test_x.py:99` `nri_pinner/nothing.py`", tmp_path) == [
        "nri_pinner/nothing.py: no such file", "tests/core/test_x.py:99: the file is shorter"]
