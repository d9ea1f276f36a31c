#!/usr/bin/env bash
# Build, lint and test the .deb of every supported Debian suite (CI, through pytest, builds and
# tests bookworm only, to keep .ci/run short). Each .deb is linted twice: with the build host's lintian
# (installed on first use) and with trixie's own, inside a trixie root (packaging/lintian-trixie.sh:
# newer tags such as aliased-location; the root is cached in build/packaging, ~75 s cold with the
# trixie base root, ~5 s a run after). Needs root. Usage: packaging/check-debs.sh [suite...]
# (default: bookworm trixie)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie)
command -v lintian >/dev/null || apt-get install -y -q lintian >&2
py=$repo/.venv/bin/python
[ -x "$py" ] || "$repo/scripts/bootstrap-venv"
for suite in "${suites[@]}"; do
    echo "== $suite: build"
    deb=$(NRI_PINNER_SUITE=$suite "$repo/packaging/build-deb.sh" | tail -n1)
    echo "== $suite: lintian $deb"
    lintian --tag-display-limit 0 --fail-on error,warning "$deb" || { echo "lintian failed for $suite" >&2; exit 1; }
    echo "   (clean; overridden, each with its reason in packaging/deb/lintian-overrides:)"
    lintian --tag-display-limit 0 --show-overrides "$deb" 2>/dev/null | sed -n 's/^O: /   /p' || true
    echo "== $suite: trixie's lintian, in a trixie root"
    "$repo/packaging/lintian-trixie.sh" --tag-display-limit 0 --fail-on error,warning "$deb" ||
        { echo "trixie's lintian failed for $suite" >&2; exit 1; }
    echo "== $suite: install / upgrade / remove / purge in a clean $suite root"
    NRI_PINNER_SUITE=$suite "$py" -m pytest -q -p no:cacheprovider "$repo/tests/packaging/test_deb_package.py"
done
