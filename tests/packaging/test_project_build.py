"""Building the project's own wheel (what scripts/bootstrap-venv's `pip install -e` and build-deb.sh do)
prints no deprecation warning from the build backend, and the wheel's metadata carries the license."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WHEEL_CACHE = REPO / "build" / "packaging" / "cache"  # build-deb.sh's downloads, when there


def test_wheel_builds_without_backend_deprecation_warnings(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    archive = subprocess.run(["tar", "--null", "-T", "-", "-cf", "-"], input=files, cwd=REPO,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-xf", "-", "-C", str(src)], input=archive, check=True)
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "--find-links",
            str(WHEEL_CACHE), "-w", str(tmp_path / "out"), str(src)]
    # Offline from build-deb.sh's cache (it downloads pyproject's setuptools requirement); else from the index.
    res = subprocess.run([*argv, "--no-index"], capture_output=True, text=True, check=False)
    if res.returncode != 0 and "No matching distribution found for setuptools" in res.stderr:
        res = subprocess.run(argv, capture_output=True, text=True, check=False)
    output = res.stdout + res.stderr
    assert res.returncode == 0, output[-3000:]
    assert "deprecat" not in output.lower(), output[-3000:]
    (wheel,) = (tmp_path / "out").glob("nri_pinner-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (metadata,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        assert "License-Expression: Apache-2.0" in zf.read(metadata).decode().splitlines()
