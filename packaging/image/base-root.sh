#!/usr/bin/env bash
# Make (once) and print the path of a minimal Debian root (bookworm, or $NRI_PINNER_SUITE) with python3, the root the
# image and the packaging tests install the .deb into. Cached under $NRI_PINNER_BUILD_DIR
# (default <repo>/build/packaging): a complete root is reused, so CI pays debootstrap only once.
# Usage: packaging/image/base-root.sh   (prints the root's path on the last line of stdout)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=${NRI_PINNER_BUILD_DIR:-$repo/build/packaging}
suite=${NRI_PINNER_SUITE:-bookworm}  # bookworm | trixie (the suite the .deb is built for)
# python3 is the .deb's only runtime dependency; python3-venv is not needed (the venv is made
# with --without-pip and populated by the pip wheel shipped in the .deb).
include=python3,ca-certificates
root=$build_dir/rootfs-$suite-base
stamp=$root/.nri-pinner-base-root
key="$suite $include copyright-kept"  # a root made before copyright files were kept is made again

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    echo "$root"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "base-root.sh: debootstrap needs root" >&2
    exit 1
fi
if ! command -v debootstrap >/dev/null; then
    echo "== apt-get install debootstrap" >&2
    apt-get install -y -q debootstrap >&2
fi

# The machine's own Debian mirror (deb822 sources), so the build works where only it is reachable.
mirror=http://deb.debian.org/debian
sources=/etc/apt/sources.list.d/debian.sources
if [ -r "$sources" ]; then
    found=$(awk -v suite="$suite" '
        /^[[:space:]]*$/ { if (uris != "" && has_suite) { print uris; exit } uris = ""; has_suite = 0; next }
        /^URIs:/ { uris = $2 }
        /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) has_suite = 1 }
        END { if (uris != "" && has_suite) print uris }' "$sources" | head -n1)
    [ -n "$found" ] && mirror=$found
fi

partial=$root.partial
rm -rf "$partial"
mkdir -p "$build_dir"
start=$(date +%s)
echo "== debootstrap $suite ($mirror, minbase, +$include) into $root" >&2
debootstrap --variant=minbase --include="$include" "$suite" "$partial" "$mirror" >&2
# Keep it small: apt lists and caches, docs and man pages are of no use in an image. Each package's
# /usr/share/doc/PKG/copyright stays (its license terms travel with the binaries, as in Debian's images).
rm -rf "$partial"/var/lib/apt/lists/* "$partial"/var/cache/apt/*.bin "$partial"/var/cache/apt/archives/*.deb \
    "$partial"/usr/share/man/* "$partial"/usr/share/info/* "$partial"/var/log/*.log
find "$partial/usr/share/doc" -mindepth 2 ! -type d ! -name copyright -delete  # depth 1: PKG dirs, links
find "$partial/usr/share/doc" -mindepth 1 -type d -empty -delete
echo "$key" >"$partial/.nri-pinner-base-root"
rm -rf "$root"
mv "$partial" "$root"
echo "== base root ready in $(( $(date +%s) - start )) s: $(du -sh "$root" | cut -f1)" >&2
echo "$root"
