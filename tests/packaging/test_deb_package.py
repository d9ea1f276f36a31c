"""The Debian package: built from the sources alone (no .venv), the venv inside the package and owned by
dpkg, installed into a clean debootstrap root of its suite (its own python3.X, not this machine's).

PID 1 is not systemd here, so the unit cannot be started. What the maintainer scripts do to it is
observed instead: the root gets /run/systemd/system (the scripts' "systemd is running" test) and
logging shims in /usr/local/sbin (first in dpkg's PATH) for systemctl and deb-systemd-invoke (log
only) and deb-systemd-helper (log, then run the real one, so enablement state is real).
"""

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
from nri_pinner.cli.man_and_completions import man_page

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "nri-pinner.service"
VENV = "/usr/lib/nri-pinner/venv"
SUITE = os.environ.get("NRI_PINNER_SUITE", "bookworm")
PYVER = {"bookworm": "3.11", "trixie": "3.13"}[SUITE]
VERSION = f"{__version__}+deb{ {'bookworm': 12, 'trixie': 13}[SUITE] }"
# The last build whose postinst made the venv (unowned by dpkg): the upgrade this package must survive.
PREVIOUS_COMMIT = "6107401"
CALLS = "/var/log/maint-calls"
WANTS = "etc/systemd/system/multi-user.target.wants/nri-pinner.service"
UNIT_PATH = "/usr/lib/systemd/system/nri-pinner.service"
# merged /usr: these are links into /usr, and trixie's lintian rejects files under them (aliased-location)
ALIASED_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "libo32")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="packaging tests need root (debootstrap, dpkg --root, chroot)"),
]


def timed(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[str, float]:
    began = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, cwd=cwd)
    if res.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res.stdout.strip().splitlines()[-1], time.monotonic() - began


@pytest.fixture(scope="session")
def deb() -> Path:
    # No PYTHON / .venv: the build must work from a fresh clone.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    path, seconds = timed([str(REPO / "packaging" / "build-deb.sh")], env=env | {"NRI_PINNER_SUITE": SUITE})
    print(f"\npackaging: build-deb.sh ({SUITE}) {seconds:.1f} s → {path}")
    return Path(path)


@pytest.fixture(scope="session")
def base_root() -> Path:
    script = str(REPO / "packaging" / "image" / "base-root.sh")
    path, seconds = timed([script], env=os.environ | {"NRI_PINNER_SUITE": SUITE})
    print(f"\npackaging: base-root.sh {seconds:.1f} s (cached after the first run) → {path}")
    return Path(path)


def chroot(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True, check=False)


def dpkg(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["dpkg", f"--root={root}", *argv], capture_output=True, text=True, check=False)
    assert res.returncode == 0, f"dpkg {' '.join(argv)}:\n{res.stdout}\n{res.stderr}"
    return res


SHIM = """#!/bin/sh
case "$*" in *is-active*) ;; *) echo "${DPKG_MAINTSCRIPT_NAME:-?}: %(name)s $*" >>%(log)s ;; esac
%(then)s
"""


def add_systemd_shims(root: Path) -> None:
    (root / "run/systemd/system").mkdir(parents=True, exist_ok=True)
    sbin = root / "usr/local/sbin"
    sbin.mkdir(parents=True, exist_ok=True)
    # `systemctl is-active` answers "active" while /run/unit-active exists (what a test sets up)
    active = '[ "$2" != is-active ] || [ -e /run/unit-active ]'
    for name, then in (("systemctl", active), ("deb-systemd-invoke", "exit 0"),
                       ("deb-systemd-helper", 'exec /usr/bin/deb-systemd-helper "$@"')):
        shim = sbin / name
        shim.write_text(SHIM % {"name": name, "log": CALLS, "then": then})
        shim.chmod(0o755)


def calls(root: Path) -> list[str]:
    """The maintainer-script calls logged since the last call (the log is emptied)."""
    log = root / CALLS.lstrip("/")
    lines = log.read_text().splitlines() if log.exists() else []
    log.write_text("")
    return lines


@pytest.fixture
def root(base_root: Path, tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "root"
    subprocess.run(["cp", "-a", str(base_root), str(path)], check=True)
    add_systemd_shims(path)
    # This machine's /sys, read-only: `install` and the unit's pre-start check read the CPU topology.
    (path / "sys").mkdir(exist_ok=True)
    subprocess.run(["mount", "--bind", "-o", "ro", "/sys", str(path / "sys")], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path / "sys")], check=False)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def installed_root(deb: Path, root: Path) -> Path:
    began = time.monotonic()
    res = dpkg(root, "-i", str(deb))
    print(f"\npackaging: dpkg --root -i {time.monotonic() - began:.1f} s")
    assert "choose ONE mode" in res.stdout and "disable = false" in res.stdout
    return root


def dpkg_field(deb: Path, field: str) -> str:
    res = subprocess.run(["dpkg-deb", "-f", str(deb), field], capture_output=True, text=True, check=True)
    return res.stdout.strip()


def test_package_metadata_and_contents(deb: Path) -> None:
    assert deb.name == f"nri-pinner_{VERSION}_amd64.deb"
    assert dpkg_field(deb, "Package") == "nri-pinner"
    assert dpkg_field(deb, "Version") == VERSION
    assert dpkg_field(deb, "Architecture") == "amd64"
    depends = dpkg_field(deb, "Depends")
    assert f"python{PYVER}" in depends and "<<" not in depends and "init-system-helpers" in depends
    control = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(deb)], capture_output=True, check=True).stdout
    members = subprocess.run(["tar", "-t"], input=control, capture_output=True, check=True).stdout.decode()
    assert {"./conffiles", "./md5sums", "./preinst", "./postinst", "./prerm", "./postrm"} <= set(members.split())
    conffiles = subprocess.run(["tar", "-xO", "./conffiles"], input=control, capture_output=True, check=True).stdout
    assert conffiles.decode().split() == ["/etc/nri-pinner/config.toml", "/etc/logrotate.d/nri-pinner"]
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    for path in (f".{UNIT_PATH}", "./etc/nri-pinner/config.toml", "./etc/logrotate.d/nri-pinner",
                 "./usr/bin/nri-pinner",
                 "./usr/share/man/man1/nri-pinner.1.gz", "./usr/share/doc/nri-pinner/changelog.gz",
                 "./usr/share/doc/nri-pinner/copyright", "./usr/share/bash-completion/completions/nri-pinner",
                 "./usr/share/zsh/vendor-completions/_nri-pinner", f".{VENV}/pyvenv.cfg", f".{VENV}/bin/nri-pinner",
                 f".{VENV}/lib/python{PYVER}/site-packages/nri_pinner/cli/main.py"):
        assert path in listing, path
    assert "/grpc/_cython/cygrpc.cpython-" in listing
    assert ".pyc" not in listing and "/wheels/" not in listing  # compiled on the node; nothing built there
    for line in listing.splitlines():  # owned by root whoever built it
        assert line.split()[1] == "root/root", line


def test_nothing_is_shipped_under_a_merged_usr_alias(deb: Path) -> None:
    """trixie's lintian (2.122, packaging/lintian-trixie.sh, run by check-debs.sh) errors with aliased-location
    on /lib/systemd/system; the host's bookworm lintian does not know the tag. Also: the man page's FILES
    names what the package installs."""
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    paths = {line.split(maxsplit=5)[5].split(" -> ")[0].removeprefix(".") for line in listing.splitlines()}
    aliased = sorted(p for p in paths if p.strip("/").split("/")[0] in ALIASED_DIRS)
    assert aliased == [], aliased
    page = man_page().split(".SH FILES\n", 1)[1].split("\n.SH ", 1)[0].replace("\\-", "-")
    named = [ln.removeprefix("\\fI").removesuffix("\\fR") for ln in page.splitlines() if ln.startswith("\\fI")]
    assert named and set(named) <= paths, named


def test_lintian_is_clean(deb: Path) -> None:
    if not shutil.which("lintian"):  # a fresh CI machine: install it, as base-root.sh does debootstrap
        subprocess.run(["apt-get", "install", "-y", "-q", "lintian"], capture_output=True, check=True)
    res = subprocess.run(["lintian", "--tag-display-limit", "0", str(deb)], capture_output=True, text=True)
    tags = [ln for ln in res.stdout.splitlines() if ln[:2] in ("E:", "W:")]
    assert tags == [], "\n".join(tags)


def test_installed_venv_is_owned_by_dpkg_and_runs(installed_root: Path) -> None:
    res = chroot(installed_root, "nri-pinner", "--version")
    assert (res.returncode, res.stdout.strip()) == (0, f"nri-pinner {__version__}"), res.stderr
    version = chroot(installed_root, f"{VENV}/bin/python", "-c", "import sys; print(sys.version_info[:2])")
    assert version.stdout.strip() == str(tuple(int(x) for x in PYVER.split(".")))
    for path in (f"{VENV}/pyvenv.cfg", f"{VENV}/lib/python{PYVER}/site-packages/grpc/__init__.py"):
        owner = chroot(installed_root, "dpkg", "-S", path)
        assert owner.stdout.startswith("nri-pinner:"), owner.stdout + owner.stderr
    verify = chroot(installed_root, "dpkg", "-V", "nri-pinner")
    assert (verify.returncode, verify.stdout) == (0, "")
    # Byte-compiled by postinst, and the .pyc are used (hash-checked against the unpacked sources).
    assert list((installed_root / VENV.lstrip("/")).rglob("nri_pinner/cli/__pycache__/main.*.pyc"))
    assert chroot(installed_root, f"{VENV}/bin/python", "-c", "import pip").returncode != 0
    man = chroot(installed_root, "zcat", "/usr/share/man/man1/nri-pinner.1.gz")
    assert "config \\-\\-check" in man.stdout and ".SH EXIT STATUS" in man.stdout
    # A fresh install neither enables nor starts the unit: the operator chooses the mode.
    assert calls(installed_root) == [
        "postinst: deb-systemd-helper debian-installed nri-pinner.service",
        "postinst: deb-systemd-helper update-state nri-pinner.service",
        "postinst: systemctl --system daemon-reload",
    ]
    assert not (installed_root / WANTS).exists()


def test_files_are_where_the_unit_expects_them(installed_root: Path) -> None:
    unit = UNIT.read_text()
    (exec_start,) = [ln.split("=", 1)[1] for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    binary, config = exec_start.split()[0], exec_start.split()[-1]
    assert os.access(installed_root / binary.lstrip("/"), os.X_OK)
    installed_config = installed_root / config.lstrip("/")
    assert installed_config.read_text() == files("nri_pinner.config").joinpath("default.toml").read_text()
    assert (installed_root / UNIT_PATH.lstrip("/")).read_text() == unit
    # The unit's pre-start check passes on the shipped config, with the shipped venv.
    (pre,) = [ln.split("=", 1)[1] for ln in unit.splitlines() if ln.startswith("ExecStartPre=")]
    res = chroot(installed_root, *pre.split())
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    # ... and fails with 2 (RestartPreventExitStatus) on a config `run` refuses on this host.
    (installed_root / "tmp/bad.toml").write_text('[cpu_manager]\nreserved_cpus = "0,4095"\n')
    res = chroot(installed_root, *pre.replace(config, "/tmp/bad.toml").split())
    assert res.returncode == 2 and "/tmp/bad.toml:2:1: cpu_manager.reserved_cpus:" in res.stderr, res.stderr
    state = installed_root / "var/lib/nri-pinner"
    assert state.is_dir() and (state.stat().st_mode & 0o777) == 0o700
    assert os.readlink(installed_root / "usr/bin/nri-pinner") == "../lib/nri-pinner/venv/bin/nri-pinner"


def test_pre_installed_mode_then_remove_and_purge(installed_root: Path) -> None:
    calls(installed_root)
    res = chroot(installed_root, "nri-pinner", "install", "--plugin-dir", "/opt/nri/plugins", "--index", "90")
    assert res.returncode == 0, res.stderr
    launcher = installed_root / "opt/nri/plugins/90-nri-pinner"
    assert f"exec {VENV}/bin/python -m nri_pinner run --config /etc/nri-pinner/config.toml" in launcher.read_text()
    assert (installed_root / "etc/nri-pinner/pre-installed").exists()

    dpkg(installed_root, "-r", "nri-pinner")
    assert calls(installed_root) == [
        "prerm: deb-systemd-invoke stop nri-pinner.service",
        "postrm: systemctl --system daemon-reload",
        "postrm: deb-systemd-helper mask nri-pinner.service",
        "postrm: systemctl daemon-reload",  # deb-systemd-helper's own, after masking
    ]
    assert not (installed_root / "usr/lib/nri-pinner").exists(), "postinst's .pyc must not keep the venv around"
    assert not launcher.exists(), "a launcher left behind would exec a removed venv at containerd start"
    assert not (installed_root / "usr/bin/nri-pinner").is_symlink()
    assert (installed_root / "etc/nri-pinner/config.toml").exists()  # conffile: kept until purge

    dpkg(installed_root, "-P", "nri-pinner")
    assert calls(installed_root) == [
        "postrm: deb-systemd-helper purge nri-pinner.service",
        "postrm: deb-systemd-helper unmask nri-pinner.service",
        "postrm: systemctl daemon-reload",  # deb-systemd-helper's own, after unmasking
    ]
    assert not (installed_root / "etc/nri-pinner").exists()
    assert not (installed_root / "var/lib/nri-pinner").exists()


@pytest.fixture(scope="session")
def previous_deb(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package as built by PREVIOUS_COMMIT's build-deb.sh (bookworm only: that is all it built)."""
    if SUITE != "bookworm":
        pytest.skip("the previous build targeted bookworm only")
    if subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS_COMMIT}^{{commit}}"]).returncode:
        pytest.skip(f"commit {PREVIOUS_COMMIT} is not in this clone (shallow?)")
    python = REPO / ".venv" / "bin" / "python"
    if not python.exists():
        pytest.skip("the previous build-deb.sh needs the dev venv (scripts/bootstrap-venv)")
    work = tmp_path_factory.mktemp("previous")
    src = work / "src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", PREVIOUS_COMMIT], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    build = work / "build"
    (build / "wheels").mkdir(parents=True)
    for wheel in (REPO / "build" / "packaging" / "cache").glob("*.whl"):  # offline when cached
        shutil.copy(wheel, build / "wheels")
    env = os.environ | {"PYTHON": str(python), "NRI_PINNER_BUILD_DIR": str(build), "NRI_PINNER_DIST_DIR": str(work)}
    path, seconds = timed([str(src / "packaging" / "build-deb.sh")], env=env, cwd=src)
    print(f"\npackaging: previous build-deb.sh ({PREVIOUS_COMMIT}) {seconds:.1f} s → {path}")
    return Path(path)


def test_upgrade_from_previous_build_keeps_unit_and_restarts_it(
    previous_deb: Path, deb: Path, root: Path
) -> None:
    dpkg(root, "-i", str(previous_deb))
    assert (root / VENV.lstrip("/") / "pyvenv.cfg").exists()
    assert chroot(root, "dpkg", "-S", f"{VENV}/pyvenv.cfg").returncode != 0  # the old, unowned venv
    # The operator enabled the unit (what `systemctl enable` leaves behind).
    (root / WANTS).parent.mkdir(parents=True, exist_ok=True)
    (root / WANTS).symlink_to("/lib/systemd/system/nri-pinner.service")  # where that build put it
    calls(root)

    dpkg(root, "-i", str(deb))  # upgrade: old venv moved aside, new files unpacked, then try-restart
    assert calls(root) == [
        "postinst: deb-systemd-helper debian-installed nri-pinner.service",
        "postinst: deb-systemd-helper update-state nri-pinner.service",
        "postinst: systemctl --system daemon-reload",
        "postinst: deb-systemd-invoke try-restart nri-pinner.service",
    ]
    assert (root / WANTS).is_symlink(), "an upgrade must not disable the unit"
    # The unit moved from /lib to /usr/lib, the same file through merged /usr's link: dpkg must not delete
    # the new file when it removes the old path (both resolve to it).
    assert (root / UNIT_PATH.lstrip("/")).read_text() == UNIT.read_text()
    assert chroot(root, "dpkg", "-S", UNIT_PATH).stdout.startswith("nri-pinner:")
    assert not (root / "usr/lib/nri-pinner/venv.pre-dpkg").exists()
    assert not (root / "usr/lib/nri-pinner/wheels").exists()
    assert chroot(root, "dpkg", "-S", f"{VENV}/pyvenv.cfg").returncode == 0
    assert (chroot(root, "dpkg", "-V", "nri-pinner").stdout, chroot(root, "nri-pinner", "--version").returncode) == (
        "", 0)

    dpkg(root, "-P", "nri-pinner")
    assert not (root / WANTS).is_symlink(), "purge must remove the enablement"


def test_upgrade_between_two_builds_of_this_scheme(installed_root: Path, deb: Path) -> None:
    """Reinstalling is dpkg's upgrade path (prerm upgrade, unpack, postinst configure <old version>):
    the running unit is not stopped, an enabled unit stays enabled, and it is try-restarted."""
    root = installed_root
    (root / WANTS).parent.mkdir(parents=True, exist_ok=True)
    (root / WANTS).symlink_to(UNIT_PATH)  # `systemctl enable`
    calls(root)
    dpkg(root, "-i", str(deb))
    assert calls(root) == [
        "postinst: deb-systemd-helper debian-installed nri-pinner.service",
        "postinst: deb-systemd-helper unmask nri-pinner.service",
        "postinst: deb-systemd-helper --quiet was-enabled nri-pinner.service",
        "postinst: deb-systemd-helper enable nri-pinner.service",
        "postinst: deb-systemd-helper update-state nri-pinner.service",
        "postinst: systemctl --system daemon-reload",
        "postinst: deb-systemd-invoke try-restart nri-pinner.service",
    ]
    assert (root / WANTS).is_symlink()
    verify = chroot(root, "dpkg", "-V", "nri-pinner")
    assert (verify.returncode, verify.stdout) == (0, "")
    assert list((root / VENV.lstrip("/")).rglob("nri_pinner/cli/__pycache__/main.*.pyc"))  # recompiled
    dpkg(root, "-P", "nri-pinner")
    assert not (root / WANTS).is_symlink() and not (root / "usr/lib/nri-pinner").exists()


def test_reinstall_after_remove_restores_a_running_unit(installed_root: Path, deb: Path) -> None:
    """`dpkg -r` stops the unit (prerm) and masks it (postrm); a later `dpkg -i` unmasks and re-enables it,
    and starts it again when removal stopped it running (an enabled unit was left stopped). A unit that
    was stopped stays stopped, as on an upgrade (try-restart)."""
    root = installed_root
    (root / WANTS).parent.mkdir(parents=True, exist_ok=True)
    (root / WANTS).symlink_to(UNIT_PATH)  # `systemctl enable --now`
    (root / "run/unit-active").touch()
    dpkg(root, "-r", "nri-pinner")
    (root / "run/unit-active").unlink()  # prerm stopped it
    calls(root)
    dpkg(root, "-i", str(deb))
    after = calls(root)
    assert after[-1] == "postinst: deb-systemd-invoke start nri-pinner.service", after
    assert "postinst: deb-systemd-helper enable nri-pinner.service" in after
    assert (root / WANTS).is_symlink()
    assert not list((root / "var/lib/nri-pinner").iterdir())  # no marker left behind
    dpkg(root, "-r", "nri-pinner")  # removed while stopped this time: not started by the reinstall
    calls(root)
    dpkg(root, "-i", str(deb))
    assert calls(root)[-1] == "postinst: deb-systemd-invoke try-restart nri-pinner.service"
    assert (root / WANTS).is_symlink()
