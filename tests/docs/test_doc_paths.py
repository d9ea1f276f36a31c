"""Every repository path the README and docs/ write in backticks exists: `nri_pinner/...`, `tests/...`,
`scripts/...`, `packaging/...`, `docs/...` and the other top-level folders, and package paths written
without `nri_pinner/` (`service/core/passes.py`). A file moved or renamed cannot stay named in the docs.
(CHANGELOG.md and benchmarks/README.md are not checked: they name files that went, on purpose.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown_docs import REPO, wrong_repo_paths

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_backticked_repository_path_exists(path: Path) -> None:
    assert wrong_repo_paths(path) == []


def test_a_missing_path_is_reported(tmp_path: Path) -> None:
    (tmp_path / "nri_pinner" / "service" / "core").mkdir(parents=True)
    (tmp_path / "nri_pinner" / "service" / "core" / "passes.py").write_text("")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "pin_fixed.py").write_text("")
    page = tmp_path / "a.md"
    page.write_text(
        "`nri_pinner/service/core/passes.py` `service/core/passes.py` `core/passes.py` `examples/pin_fixed`\n"
        "`tests/engine/test_gone.py` `engine/gone.py` `tests/<name>.py` `nri_pinner/x.py:12` `nri_pinner/...`\n"
        "```sh\n`scripts/not-checked-in-a-fence`\n```\n")
    assert wrong_repo_paths(page, tmp_path) == [
        "a.md:2: `tests/engine/test_gone.py`: no such path",
        "a.md:2: `engine/gone.py`: no such file in the package",
    ]
