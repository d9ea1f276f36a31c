"""The shell blocks of the docs tagged with this test
(`<!-- run-by: tests/docs/test_doc_commands.py::test_the_blocks_that_name_it_run -->`) run, as written,
from the repository's root with this checkout's nri-pinner first on PATH: the CLI tour of the README and
docs/operations.md (topology, config, simulate: nothing that needs root or a runtime)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from markdown_docs import REPO, run_blocks_named

THIS = "tests/docs/test_doc_commands.py::test_the_blocks_that_name_it_run"


def test_the_blocks_that_name_it_run(tmp_path: Path) -> None:
    blocks = run_blocks_named(THIS)
    assert {str(p.relative_to(REPO)) for p, _ in blocks} >= {"README.md", "docs/operations.md"}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "nri-pinner"  # this checkout's code, whatever is installed
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m nri_pinner \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "TMPDIR": str(tmp_path),
           "PYTHONPATH": str(REPO)}
    for path, block in blocks:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        where = f"{path.relative_to(REPO)}:{block.line}"
        assert done.returncode == 0, f"{where} exited {done.returncode}:\n{block.text}\n{done.stderr[-2000:]}"
        assert done.stdout.strip(), f"{where} printed nothing"
