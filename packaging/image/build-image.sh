#!/usr/bin/env bash
# Build the DaemonSet image without a registry or container tool: a minimal debootstrap bookworm
# root (cached, see base-root.sh) + the project's .deb installed with dpkg, packed as an OCI
# image-layout tarball (one uncompressed layer) by the e2e harness's image builder.
# Output: dist/nri-pinner-image_<version>.tar, image name e2e.local/nri-pinner:<version>
# (override with NRI_PINNER_IMAGE_NAME). Import: ctr -n k8s.io images import --snapshotter overlayfs FILE;
# push: skopeo copy oci-archive:FILE docker://REGISTRY/nri-pinner:<version> (README: Install).
# Idempotent: an image whose .deb and base root did not change is not rebuilt.
# Usage: packaging/image/build-image.sh   (prints the tarball's path on the last line of stdout)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=${NRI_PINNER_BUILD_DIR:-$repo/build/packaging}
dist=${NRI_PINNER_DIST_DIR:-$repo/dist}
py=${PYTHON:-$repo/.venv/bin/python}
[ -x "$py" ] || py=python3
[ "$(id -u)" = 0 ] || { echo "build-image.sh: needs root (debootstrap, dpkg --root, chroot)" >&2; exit 1; }

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo/nri_pinner/__init__.py")
name=${NRI_PINNER_IMAGE_NAME:-e2e.local/nri-pinner:$version}
out=$dist/nri-pinner-image_${version}.tar
t0=$(date +%s)

base=$("$repo/packaging/image/base-root.sh" | tail -n1)
t1=$(date +%s)
deb=$("$repo/packaging/build-deb.sh" | tail -n1)
t2=$(date +%s)

key="$name $(sha256sum "$deb" "$0" | cut -d' ' -f1 | tr '\n' ' ') $(cat "$base/.nri-pinner-base-root")"
stamp=$build_dir/image.key
if [ -f "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    echo "== image up to date: $out ($name)" >&2
    echo "$out"
    exit 0
fi

root=$build_dir/rootfs-image
rm -rf "$root"
cp -a "$base" "$root"
rm -f "$root/.nri-pinner-base-root"
# dpkg --root runs the maintainer scripts chrooted into the root: postinst byte-compiles the venv the
# .deb carries (built at package build time) with the root's own python3, not this machine's.
dpkg --root="$root" -i "$deb" >&2
got=$(chroot "$root" nri-pinner --version)
[ "$got" = "nri-pinner $version" ] || { echo "build-image.sh: chroot nri-pinner --version said '$got'" >&2; exit 1; }
# Docs, man pages and locales go; every package's copyright file stays (license terms, as in the base).
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/var/log/* "$root"/tmp/* \
    "$root"/usr/share/man/* "$root"/usr/share/locale/*
find "$root/usr/share/doc" -mindepth 2 ! -type d ! -name copyright -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
t3=$(date +%s)

PYTHONPATH=$repo "$py" - "$root" "$name" "$out" <<'EOF'
import sys
from pathlib import Path

from tests.e2e.oci_image import build_oci_image

root, name, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
build_oci_image(
    root,
    name,
    ["nri-pinner", "run", "--config", "/etc/nri-pinner/config.toml"],
    out,
    labels={"org.opencontainers.image.title": "nri-pinner", "org.opencontainers.image.version": name.rsplit(":", 1)[1]},
)
EOF
echo "$key" >"$stamp"
t4=$(date +%s)
echo "== $out ($name, $(du -h "$out" | cut -f1); root $(du -sh "$root" | cut -f1)): base root $((t1 - t0)) s, deb $((t2 - t1)) s," \
    "dpkg -i $((t3 - t2)) s, pack $((t4 - t3)) s" >&2
echo "$out"
