#!/usr/bin/env bash
# Build dist/nri-pinner_<version>_amd64.deb with dpkg-deb from a staged tree.
#
# A node has no network and no PyPI, and Debian bookworm's own python3-grpcio/protobuf are far too
# old, so the package carries its runtime dependencies as wheels (CPython 3.11 / manylinux x86_64,
# pinned in packaging/requirements-runtime.txt) plus the project's own wheel and pip's wheel; postinst
# makes /usr/lib/nri-pinner/venv with the target's python3 (bookworm: 3.11) and installs them with
# `pip --no-index`. Downloaded wheels are cached in $NRI_PINNER_BUILD_DIR/wheels (default
# build/packaging/wheels), so a rebuild needs no network.
# Usage: packaging/build-deb.sh   (prints the .deb's path on the last line of stdout)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${NRI_PINNER_BUILD_DIR:-$repo/build/packaging}
dist=${NRI_PINNER_DIST_DIR:-$repo/dist}
py=${PYTHON:-$repo/.venv/bin/python}
[ -x "$py" ] || py=python3
pip_version=23.2.1   # the pip that runs (from its wheel) in postinst
target_platforms=(manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_28_x86_64 any)

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo/nri_pinner/__init__.py")
[ -n "$version" ] || { echo "build-deb.sh: no __version__ in nri_pinner/__init__.py" >&2; exit 1; }
deb=$dist/nri-pinner_${version}_amd64.deb
stage=$build_dir/deb-stage
lib=$stage/usr/lib/nri-pinner
t0=$(date +%s)
# Reproducible: same sources → same .deb bytes (wheel zip times, tar mtimes), so the image build can
# tell that nothing changed.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 1700000000)}
export SOURCE_DATE_EPOCH

rm -rf "$stage"
mkdir -p "$lib/wheels" "$stage/DEBIAN" "$stage/lib/systemd/system" "$stage/etc/nri-pinner" \
    "$stage/usr/bin" "$stage/var/lib/nri-pinner" "$stage/usr/share/doc/nri-pinner" "$dist" "$build_dir/wheels"

# 1. Wheels: runtime deps for the target interpreter (from the cache; the index only on a miss),
#    pip, and the project itself.
target_args=(--only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none)
for p in "${target_platforms[@]}"; do target_args+=(--platform "$p"); done
reqs=(-r "$repo/packaging/requirements-runtime.txt" "pip==$pip_version")
if ! "$py" -m pip download --quiet --disable-pip-version-check --no-index --find-links "$build_dir/wheels" \
        "${target_args[@]}" -d "$lib/wheels" "${reqs[@]}" 2>/dev/null; then
    echo "== fetching wheels into $build_dir/wheels" >&2
    "$py" -m pip download --quiet --disable-pip-version-check "${target_args[@]}" -d "$build_dir/wheels" "${reqs[@]}"
    "$py" -m pip download --quiet --disable-pip-version-check --no-index --find-links "$build_dir/wheels" \
        "${target_args[@]}" -d "$lib/wheels" "${reqs[@]}"
fi
"$py" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
    -w "$lib/wheels" "$repo" >/dev/null
rm -rf "$repo/build/lib" "$repo/build/bdist.linux-x86_64"  # setuptools' leftovers
{ grep -v '^#' "$repo/packaging/requirements-runtime.txt" | grep .; echo "nri-pinner==$version"; } \
    >"$lib/requirements.txt"
t1=$(date +%s)

# 2. Files the unit and the CLI expect.
install -m 0644 "$repo/systemd/nri-pinner.service" "$stage/lib/systemd/system/nri-pinner.service"
install -m 0644 "$repo/nri_pinner/config/default.toml" "$stage/etc/nri-pinner/config.toml"
ln -s ../lib/nri-pinner/venv/bin/nri-pinner "$stage/usr/bin/nri-pinner"
chmod 0700 "$stage/var/lib/nri-pinner"
cat >"$stage/usr/share/doc/nri-pinner/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: nri-pinner
License: Apache-2.0
Comment: bundled wheels (grpcio, protobuf, structlog, prometheus-client, pyroute2,
 typing-extensions, pip) keep their own licenses, found in each wheel's dist-info.
EOF

# 3. Maintainer scripts and control file.
install -m 0644 "$repo/packaging/deb/conffiles" "$stage/DEBIAN/conffiles"
for script in postinst prerm postrm; do
    install -m 0755 "$repo/packaging/deb/$script" "$stage/DEBIAN/$script"
done
size_kib=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@INSTALLED_SIZE@/$size_kib/" \
    "$repo/packaging/deb/control.in" >"$stage/DEBIAN/control"

find "$stage" -exec touch --no-dereference --date="@$SOURCE_DATE_EPOCH" {} +

# 4. The package: owned by root whoever builds it; gzip, since the wheels are compressed already.
dpkg-deb --root-owner-group -Zgzip --build "$stage" "$deb" >/dev/null
t2=$(date +%s)
echo "== $deb ($(du -h "$deb" | cut -f1)): wheels $((t1 - t0)) s, dpkg-deb $((t2 - t1)) s" >&2
echo "$deb"
