"""The Debian package: builds with dpkg-deb, installs into a clean debootstrap bookworm root (its own
python3, not this machine's), puts files where the unit expects them, removes and purges cleanly."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import pytest

from nri_pinner import __version__

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "nri-pinner.service"
VENV = "/usr/lib/nri-pinner/venv"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="packaging tests need root (debootstrap, dpkg --root, chroot)"),
]


def timed(argv: list[str]) -> tuple[str, float]:
    began = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res.stdout.strip().splitlines()[-1], time.monotonic() - began


@pytest.fixture(scope="session")
def deb() -> Path:
    path, seconds = timed([str(REPO / "packaging" / "build-deb.sh")])
    print(f"\npackaging: build-deb.sh {seconds:.1f} s → {path}")
    return Path(path)


@pytest.fixture(scope="session")
def base_root() -> Path:
    path, seconds = timed([str(REPO / "packaging" / "image" / "base-root.sh")])
    print(f"\npackaging: base-root.sh {seconds:.1f} s (cached after the first run) → {path}")
    return Path(path)


def chroot(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True, check=False)


@pytest.fixture
def installed_root(deb: Path, base_root: Path, tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "root"
    subprocess.run(["cp", "-a", str(base_root), str(root)], check=True)
    began = time.monotonic()
    res = subprocess.run(["dpkg", f"--root={root}", "-i", str(deb)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    print(f"\npackaging: dpkg --root -i {time.monotonic() - began:.1f} s")
    assert "choose ONE mode" in res.stdout and "disable = false" in res.stdout
    yield root
    shutil.rmtree(root, ignore_errors=True)


def dpkg_field(deb: Path, field: str) -> str:
    res = subprocess.run(["dpkg-deb", "-f", str(deb), field], capture_output=True, text=True, check=True)
    return res.stdout.strip()


def test_package_metadata_and_contents(deb: Path) -> None:
    assert deb.name == f"nri-pinner_{__version__}_amd64.deb"
    assert dpkg_field(deb, "Package") == "nri-pinner"
    assert dpkg_field(deb, "Version") == __version__
    assert dpkg_field(deb, "Architecture") == "amd64"
    assert "python3 (>= 3.11~)" in dpkg_field(deb, "Depends")
    conffiles = subprocess.run(
        ["dpkg-deb", "--ctrl-tarfile", str(deb)], capture_output=True, check=True
    ).stdout
    assert b"./conffiles" in subprocess.run(["tar", "-t"], input=conffiles, capture_output=True, check=True).stdout
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    for path in ("./lib/systemd/system/nri-pinner.service", "./etc/nri-pinner/config.toml", "./usr/bin/nri-pinner"):
        assert path in listing
    assert f"nri_pinner-{__version__}-py3-none-any.whl" in listing and "/grpcio-" in listing
    for line in listing.splitlines():  # owned by root whoever built it
        assert line.split()[1] == "root/root", line


def test_installed_root_runs_nri_pinner_with_its_own_python(installed_root: Path) -> None:
    res = chroot(installed_root, "nri-pinner", "--version")
    assert (res.returncode, res.stdout.strip()) == (0, f"nri-pinner {__version__}"), res.stderr
    cfg = (installed_root / VENV.lstrip("/") / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in cfg
    version = chroot(installed_root, f"{VENV}/bin/python", "-c", "import sys; print(sys.version_info[:2])")
    assert version.stdout.strip() == "(3, 11)"
    # pip ran from its wheel: it is not left in the venv.
    assert chroot(installed_root, f"{VENV}/bin/python", "-c", "import pip").returncode != 0


def test_files_are_where_the_unit_expects_them(installed_root: Path) -> None:
    (exec_start,) = [ln.split("=", 1)[1] for ln in UNIT.read_text().splitlines() if ln.startswith("ExecStart=")]
    binary, config = exec_start.split()[0], exec_start.split()[-1]
    assert os.access(installed_root / binary.lstrip("/"), os.X_OK)
    installed_config = installed_root / config.lstrip("/")
    assert installed_config.read_text() == files("nri_pinner.config").joinpath("default.toml").read_text()
    assert (installed_root / "lib/systemd/system/nri-pinner.service").read_text() == UNIT.read_text()
    state = installed_root / "var/lib/nri-pinner"
    assert state.is_dir() and (state.stat().st_mode & 0o777) == 0o700
    assert os.readlink(installed_root / "usr/bin/nri-pinner") == "../lib/nri-pinner/venv/bin/nri-pinner"
    analyze = shutil.which("systemd-analyze")
    if analyze and Path("/usr/lib/systemd/system/sysinit.target").exists():
        shutil.copytree(
            "/usr/lib/systemd/system", installed_root / "usr/lib/systemd/system", symlinks=True, dirs_exist_ok=True
        )
        res = subprocess.run(
            [analyze, "verify", f"--root={installed_root}", "nri-pinner.service"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert (res.returncode, res.stdout + res.stderr) == (0, "")


def test_pre_installed_mode_then_remove_and_purge(installed_root: Path) -> None:
    res = chroot(installed_root, "nri-pinner", "install", "--plugin-dir", "/opt/nri/plugins", "--index", "90")
    assert res.returncode == 0, res.stderr
    launcher = installed_root / "opt/nri/plugins/90-nri-pinner"
    assert f"exec {VENV}/bin/python -m nri_pinner run --config /etc/nri-pinner/config.toml" in launcher.read_text()
    assert (installed_root / "etc/nri-pinner/pre-installed").exists()

    remove = subprocess.run(["dpkg", f"--root={installed_root}", "-r", "nri-pinner"], capture_output=True, text=True)
    assert remove.returncode == 0, remove.stderr
    assert not (installed_root / VENV.lstrip("/")).exists()
    assert not launcher.exists(), "a launcher left behind would exec a removed venv at containerd start"
    assert not (installed_root / "usr/bin/nri-pinner").is_symlink()
    assert (installed_root / "etc/nri-pinner/config.toml").exists()  # conffile: kept until purge

    purge = subprocess.run(["dpkg", f"--root={installed_root}", "-P", "nri-pinner"], capture_output=True, text=True)
    assert purge.returncode == 0, purge.stderr
    assert not (installed_root / "etc/nri-pinner/config.toml").exists()
    assert not (installed_root / "var/lib/nri-pinner").exists()
