"""Every shell block in the repository's Markdown is run by a named test or says why not
(`<!-- run-by: tests/<path>.py::<test> -->` / `<!-- not-run: <reason> -->` on the line before its fence);
an untagged one fails. The rules are in markdown_docs.py and docs/testing.md."""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown_docs import REPO, markdown_files, split_fences, wrong_shell_blocks

FILES = markdown_files()


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_shell_block_is_run_or_says_why_not(path: Path) -> None:
    assert wrong_shell_blocks(path) == []


def test_the_readme_and_docs_have_shell_blocks_to_check() -> None:
    shell = [b for f in FILES for b in split_fences(f.read_text())[0] if b.is_shell()]
    assert len(shell) >= 8


SAMPLE = """# Sample

<!-- not-run: needs a cluster -->
```sh
kubectl apply -k x
```

```bash
./scripts/untagged
```

<!-- not-run: -->
```console
$ nri-pinner status
```

<!-- run-by: tests/core/test_x.py::test_gone -->
```sh
nri-pinner topology
```

<!-- run-by: tests/core/test_x.py::test_runs_it -->
```sh
nri-pinner topology
```

<!-- run-by: tests/core/test_x.py::test_runs_something_else -->
```sh
NRI_PINNER_X=1 nri-pinner topology
```

<!-- run-by: tests/core/test_x.py::test_generic -->
```sh
anything --at all
```

```
$ sudo reboot
```

```
NRI_PINNER_SKIP_E2E=1 ./scripts/test
```

```
nri_pinner/
  engine/   pure allocation
```

```toml
[nri]
socket = "/x"
```

- a list item
  ```sh
  ./scripts/indented
  ```
"""


def test_untagged_and_badly_tagged_blocks_are_reported(tmp_path: Path) -> None:
    (tmp_path / "tests" / "core").mkdir(parents=True)
    (tmp_path / "tests" / "core" / "test_x.py").write_text(
        "import subprocess\n\n"
        "def test_runs_it() -> None:\n    subprocess.run(['nri-pinner', 'topology'])\n\n"
        "def test_runs_something_else() -> None:\n    subprocess.run(['ls'])\n\n"
        "def test_generic() -> None:\n    run_blocks_named('x')\n")
    page = tmp_path / "README.md"
    page.write_text(SAMPLE)
    assert wrong_shell_blocks(page, tmp_path) == [
        "README.md:8: shell block without <!-- run-by: tests/...::test --> or <!-- not-run: reason -->",
        "README.md:13: not-run without a reason",
        "README.md:18: run-by tests/core/test_x.py::test_gone: no such test in that file",
        "README.md:28: run-by tests/core/test_x.py::test_runs_something_else: the test never names nri-pinner",
        "README.md:37: shell block without <!-- run-by: tests/...::test --> or <!-- not-run: reason -->",
        "README.md:41: shell block without <!-- run-by: tests/...::test --> or <!-- not-run: reason -->",
        "README.md:56: shell block without <!-- run-by: tests/...::test --> or <!-- not-run: reason -->",
    ]


def test_a_tag_must_be_the_line_right_before_the_fence(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("<!-- not-run: too far -->\nA sentence in between.\n\n```sh\nls\n```\n")
    assert wrong_shell_blocks(page, tmp_path) == [
        "a.md:4: shell block without <!-- run-by: tests/...::test --> or <!-- not-run: reason -->"]
