#!/usr/bin/env bash
# Lint .deb files with Debian trixie's own lintian, run inside a trixie root: the build host's lintian
# (bookworm's 2.116) does not know trixie's tags, e.g. aliased-location for files under /lib (the
# merged-/usr rule). The root is trixie's base root (packaging/image/base-root.sh) plus lintian from
# the same mirror, made once and cached in $NRI_PINNER_BUILD_DIR/rootfs-trixie-lintian (default
# build/packaging): about 1 min cold, under 1 s cached. Remove the directory to refresh lintian.
# Needs root (debootstrap, chroot). Usage: packaging/lintian-trixie.sh [lintian options] DEB...
# (the .deb paths are the arguments that name existing files; the others go to lintian as they are).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${NRI_PINNER_BUILD_DIR:-$repo/build/packaging}
root=$build_dir/rootfs-trixie-lintian
stamp=$root/.nri-pinner-lintian-root
want="trixie lintian $(sha256sum "$0" | cut -d' ' -f1)"
[ "$(id -u)" = 0 ] || { echo "lintian-trixie.sh: needs root (debootstrap, chroot)" >&2; exit 2; }
in_root() { chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "${@:2}"; }

# One build at a time (check-debs.sh and pytest may both ask).
mkdir -p "$build_dir"
exec 9>"$build_dir/.lintian-root.lock"
flock 9
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    start=$(date +%s)
    base=$(NRI_PINNER_SUITE=trixie NRI_PINNER_BUILD_DIR=$build_dir "$repo/packaging/image/base-root.sh" | tail -n1)
    partial=$root.partial
    rm -rf "$partial" "$root"
    cp -a "$base" "$partial"
    rm -f "$partial/.nri-pinner-base-root"
    cp /etc/resolv.conf "$partial/etc/resolv.conf"
    echo "== apt-get install lintian in a copy of $base" >&2
    in_root "$partial" apt-get update -qq >&2
    # (no /dev/pts in the chroot: apt's "Can not write log" is harmless)
    in_root "$partial" apt-get install -y -qq --no-install-recommends lintian >/dev/null 2>"$partial/tmp/apt.log" ||
        { cat "$partial/tmp/apt.log" >&2; exit 1; }
    rm -rf "$partial"/var/lib/apt/lists/* "$partial"/var/cache/apt/*.bin "$partial"/var/cache/apt/archives/*.deb \
        "$partial"/tmp/apt.log
    echo "$want" >"$partial/.nri-pinner-lintian-root"
    mv "$partial" "$root"
    echo "== trixie lintian root ready in $(( $(date +%s) - start )) s ($(du -sh "$root" | cut -f1)):" \
        "$(in_root "$root" lintian --version)" >&2
fi

args=()
work=$(mktemp -d "$root/tmp/lint.XXXXXX")
trap 'rm -rf "$work"' EXIT
chmod 0755 "$work"
for arg in "$@"; do
    if [ -f "$arg" ]; then
        cp "$arg" "$work/"
        args+=("/tmp/${work##*/}/$(basename "$arg")")
    else
        args+=("$arg")
    fi
done
# As nobody: lintian reads untrusted archives and says root is "not recommended".
chroot --userspec=nobody:nogroup "$root" env -i PATH=/usr/bin:/bin HOME=/tmp LC_ALL=C.UTF-8 lintian "${args[@]}"
