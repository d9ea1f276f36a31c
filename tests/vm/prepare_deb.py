"""Host side of the VM tier's .deb parts: build the trixie .deb and put it where the guest reads it.

The guest sees the working tree read-only at $REPO, so the package goes to
``build/vm/share/nri-pinner.deb`` before the (shared) boot. A second file, ``nri-pinner-next.deb``, is
the same package with a higher version (``<version>+vmnext``), repacked: the guest's upgrade step
installs it over the first, so dpkg runs the real upgrade path (preinst/prerm ``upgrade``, postinst
``configure <old version>`` → try-restart) rather than a reinstall of one version.

``prepare(repo)`` needs root (build-deb.sh: debootstrap, chroot) and, on the first run, the network
(Debian mirror, PyPI); later runs use build-deb.sh's caches (cold ~45 s, warm ~10 s on the 2-core host).
It also readies the CRI stubs the guest part's client imports (tests/e2e/gen, generated here with the
host's grpcio-tools) and puts the CRI api.proto they come from at ``build/vm/share/cri-api.proto``: the
guest has neither the proto nor protoc, and tests/e2e/cri_stubs.py checks the stubs against the proto.
The proto is this machine's (golang-github-kubernetes-cri-api-dev, scripts/install-runtimes.sh) or, without
it, trixie's package fetched with a private apt state (this machine's sources are not touched).

Runnable as a script: ``python tests/vm/prepare_deb.py [REPO]`` prints the path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITE = "trixie"  # the guest's release (python3.13)
SHARE = Path("build/vm/share")
DEB_NAME = "nri-pinner.deb"
NEXT_NAME = "nri-pinner-next.deb"
NEXT_SUFFIX = "+vmnext"
CRI_PROTO = "usr/share/gocode/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto"
CRI_PACKAGE = "golang-github-kubernetes-cri-api-dev"
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


class PrepareError(RuntimeError):
    pass


def _run(argv: list[str], env: dict[str, str] | None = None) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if res.returncode != 0:
        raise PrepareError(f"{' '.join(argv)} failed ({res.returncode}):\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}")
    return res.stdout


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def build_deb(repo: Path) -> Path:
    """packaging/build-deb.sh for the guest's suite, from a clean environment (no PYTHON / venv)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    env["NRI_PINNER_SUITE"] = SUITE
    out = _run([str(repo / "packaging" / "build-deb.sh")], env=env)
    return Path(out.strip().splitlines()[-1])


def repack_next(deb: Path, out: Path) -> str:
    """``deb`` with its control Version raised by NEXT_SUFFIX, written to ``out``; returns that version."""
    with tempfile.TemporaryDirectory(prefix="vm-deb-next-") as tmp:
        tree = Path(tmp) / "tree"
        _run(["dpkg-deb", "-R", str(deb), str(tree)])
        control = tree / "DEBIAN" / "control"
        lines = control.read_text().splitlines()
        version = ""
        for i, line in enumerate(lines):
            if line.startswith("Version: "):
                version = line.removeprefix("Version: ") + NEXT_SUFFIX
                lines[i] = f"Version: {version}"
        if not version:
            raise PrepareError(f"{deb} has no Version field")
        control.write_text("\n".join(lines) + "\n")
        partial = out.with_name(out.name + ".partial")
        _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(partial)])
        partial.replace(out)
    return version


def _mirror() -> str:
    """The first Debian mirror of this machine's deb822 sources (as packaging/image/base-root.sh)."""
    if DEBIAN_SOURCES.is_file():
        for line in DEBIAN_SOURCES.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


def fetch_trixie_proto(repo: Path, target: Path) -> None:
    """trixie's CRI api.proto from its package, through a private apt state under build/vm/apt-trixie."""
    state = repo / "build" / "vm" / "apt-trixie"
    for d in ("lists/partial", "cache/archives/partial", "prefs.d", "debs"):
        (state / d).mkdir(parents=True, exist_ok=True)
    sources = state / "trixie.list"
    sources.write_text(f"deb [signed-by={KEYRING}] {_mirror()} trixie main\n")
    apt = ["-o", f"Dir::Etc::sourcelist={sources}", "-o", "Dir::Etc::sourceparts=-",
           "-o", "Dir::Etc::preferences=/dev/null", "-o", f"Dir::Etc::preferencesparts={state / 'prefs.d'}",
           "-o", f"Dir::State::Lists={state / 'lists'}", "-o", f"Dir::Cache={state / 'cache'}",
           "-o", "APT::Get::List-Cleanup=0", "-o", "APT::Sandbox::User=root"]
    _run(["apt-get", *apt, "update", "-qq"])
    debs = state / "debs"
    for old in debs.glob("*.deb"):
        old.unlink()
    subprocess.run(["apt-get", *apt, "download", "-qq", CRI_PACKAGE], cwd=debs, capture_output=True, check=True)
    (deb,) = debs.glob(f"{CRI_PACKAGE}_*.deb")
    with tempfile.TemporaryDirectory(prefix="vm-cri-api-") as tmp:
        _run(["dpkg-deb", "-x", str(deb), tmp])
        shutil.copyfile(Path(tmp) / CRI_PROTO, target)


def prepare_cri_stubs(repo: Path) -> Path:
    """build/vm/share/cri-api.proto and tests/e2e/gen generated from it; returns the proto's path."""
    target = repo / SHARE / "cri-api.proto"
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.is_file():
        local = [Path(os.environ.get("NRI_PINNER_E2E_CRI_PROTO", "/nonexistent")), Path("/") / CRI_PROTO]
        found = next((p for p in local if p.is_file()), None)
        if found is not None:
            shutil.copyfile(found, target)
        else:
            fetch_trixie_proto(repo, target)
    code = "import sys; from pathlib import Path; from tests.e2e.cri_stubs import ensure_cri_stubs; " \
           "ensure_cri_stubs(Path(sys.argv[1]))"
    res = subprocess.run([sys.executable, "-c", code, str(target)], cwd=repo, capture_output=True, text=True,
                         check=False)
    if res.returncode != 0:
        raise PrepareError(f"CRI stubs from {target} (needs grpcio-tools in {sys.executable}):\n{res.stderr[-3000:]}")
    return target


def prepare(repo: Path) -> Path:
    """Build the trixie .deb from ``repo`` and copy it to ``<repo>/build/vm/share/nri-pinner.deb`` (plus the
    repacked ``nri-pinner-next.deb``, the CRI proto and stubs); return the first path. The next package is
    remade only when the built one changed (build-deb.sh is reproducible: same sources, same bytes)."""
    repo = repo.resolve()
    began = time.monotonic()
    built = build_deb(repo)
    share = repo / SHARE
    share.mkdir(parents=True, exist_ok=True)
    target, nxt, stamp = share / DEB_NAME, share / NEXT_NAME, share / (NEXT_NAME + ".source-sha256")
    digest = _sha256(built)
    partial = target.with_name(target.name + ".partial")
    shutil.copyfile(built, partial)
    partial.replace(target)
    if not (nxt.is_file() and stamp.is_file() and stamp.read_text().strip() == digest):
        repack_next(target, nxt)
        stamp.write_text(digest + "\n")
    prepare_cri_stubs(repo)
    print(f"vm: {built.name} → {target} (+ {nxt.name}) in {time.monotonic() - began:.1f} s", file=sys.stderr)
    return target


if __name__ == "__main__":
    print(prepare(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]))
