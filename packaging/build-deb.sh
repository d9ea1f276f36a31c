#!/usr/bin/env bash
# Build dist/nri-pinner_<version>+deb<N>_amd64.deb for one Debian suite, from a fresh clone.
#
# Debian's own python3-grpcio/protobuf are too old for the project, so the package carries a
# complete private venv, /usr/lib/nri-pinner/venv, built HERE at package build time from PyPI
# wheels (pinned in packaging/requirements-runtime.txt) with the suite's own python3.X, inside a
# clean debootstrap root of that suite (packaging/image/base-root.sh, cached). Every venv file,
# is in the data tarball: dpkg owns it (dpkg -S, dpkg -V) and an upgrade replaces it file by
# file; nothing is built or downloaded on the node (postinst only byte-compiles, like py3compile).
#
# Needs: root (debootstrap, chroot), python3 with pip on the build host (downloads only), network to
# PyPI and the Debian mirror on the first run. Downloads are cached in $NRI_PINNER_BUILD_DIR/wheels
# (default build/packaging), so a rebuild is offline. The .venv of scripts/bootstrap-venv is not used.
# Usage: [NRI_PINNER_SUITE=bookworm|trixie] packaging/build-deb.sh   (the .deb's path is the last line)
#        NRI_PINNER_DEB_REVISION=N adds "+N" after the suite tag (upgrade tests build two versions).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${NRI_PINNER_BUILD_DIR:-$repo/build/packaging}
dist=${NRI_PINNER_DIST_DIR:-$repo/dist}
suite=${NRI_PINNER_SUITE:-bookworm}
case $suite in
bookworm) pyver=3.11 tag=deb12 ;;
trixie) pyver=3.13 tag=deb13 ;;
*) echo "build-deb.sh: unknown suite '$suite' (bookworm or trixie)" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "build-deb.sh: needs root (the venv is built in a debootstrap root with chroot)" >&2; exit 2; }
host_py=${PYTHON:-python3}
"$host_py" -m pip --version >/dev/null 2>&1 ||
    { echo "build-deb.sh: '$host_py -m pip' is missing (apt-get install python3-pip, or set PYTHON)" >&2; exit 2; }
pip_version=23.2.1   # runs from its wheel inside the build root only; not shipped
target_platforms=(manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_28_x86_64 any)

upstream=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo/nri_pinner/__init__.py")
[ -n "$upstream" ] || { echo "build-deb.sh: no __version__ in nri_pinner/__init__.py" >&2; exit 1; }
version=$upstream+$tag${NRI_PINNER_DEB_REVISION:++$NRI_PINNER_DEB_REVISION}
deb=$dist/nri-pinner_${version}_amd64.deb
stage=$build_dir/deb-stage-$suite
wheels=$build_dir/wheels-$suite
venv=/usr/lib/nri-pinner/venv
doc=$stage/usr/share/doc/nri-pinner
t0=$(date +%s)
# Reproducible: same sources → same .deb bytes (pyc are hash-based, mtimes clamped).
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 1700000000)}
export SOURCE_DATE_EPOCH

# 1. Wheels for the suite's interpreter, setuptools for the project's own wheel: from the cache,
#    the index only on a miss. The project wheel is built in an isolated env (no host setuptools).
py_nodot=${pyver/./}
target_args=(--only-binary=:all: --python-version "$pyver" --implementation cp --abi "cp$py_nodot" --abi abi3 --abi none)
for p in "${target_platforms[@]}"; do target_args+=(--platform "$p"); done
pip_q=(--quiet --disable-pip-version-check)
mkdir -p "$build_dir/cache" "$dist"
rm -rf "$wheels" && mkdir -p "$wheels"
reqs=(-r "$repo/packaging/requirements-runtime.txt" "pip==$pip_version")
if ! "$host_py" -m pip download "${pip_q[@]}" --no-index --find-links "$build_dir/cache" "${target_args[@]}" \
        -d "$wheels" "${reqs[@]}" 2>/dev/null; then
    echo "== fetching $suite wheels into $build_dir/cache" >&2
    "$host_py" -m pip download "${pip_q[@]}" "${target_args[@]}" -d "$build_dir/cache" "${reqs[@]}"
    "$host_py" -m pip download "${pip_q[@]}" --no-index --find-links "$build_dir/cache" "${target_args[@]}" \
        -d "$wheels" "${reqs[@]}"
fi
setuptools_req=$(sed -n 's/^requires = \["\(setuptools[^"]*\)"\].*/\1/p' "$repo/pyproject.toml")
[ -n "$setuptools_req" ] || { echo "build-deb.sh: no setuptools in pyproject's [build-system] requires" >&2; exit 1; }
"$host_py" -m pip download "${pip_q[@]}" --only-binary=:all: --no-index --find-links "$build_dir/cache" \
    -d "$build_dir/cache" "$setuptools_req" >/dev/null 2>&1 ||
    "$host_py" -m pip download "${pip_q[@]}" --only-binary=:all: -d "$build_dir/cache" "$setuptools_req"
src=$build_dir/src
rm -rf "$src" && mkdir -p "$src"
# The committed sources only (git archive when it is a checkout), so a dirty build/ never leaks in.
if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -xf - -C "$src"
else
    (cd "$repo" && tar --exclude=./build --exclude=./dist --exclude=./.venv -cf - .) | tar -xf - -C "$src"
fi
"$host_py" -m pip wheel "${pip_q[@]}" --no-deps --no-index --find-links "$build_dir/cache" -w "$wheels" "$src" >/dev/null
{ grep -v '^#' "$repo/packaging/requirements-runtime.txt" | grep .; echo "nri-pinner==$upstream"; } >"$wheels/requirements.txt"
t1=$(date +%s)

# 2. The venv, built at its final path inside a throwaway copy of the suite's clean root, with the
#    suite's python$pyver. No .pyc in the package (Debian policy: postinst byte-compiles, prerm
#    deletes them, as py3compile/py3clean do for python3-* packages).
base=$(NRI_PINNER_SUITE=$suite NRI_PINNER_BUILD_DIR=$build_dir "$repo/packaging/image/base-root.sh" | tail -n1)
broot=$build_dir/venv-root-$suite
rm -rf "$broot"
cp -a "$base" "$broot"
cp -a "$wheels" "$broot/tmp/wheels"
in_root() { chroot "$broot" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin PIP_CONFIG_FILE=/dev/null LC_ALL=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 "$@"; }
in_root "/usr/bin/python$pyver" -m venv --without-pip "$venv"
in_root "$venv/bin/python" -E -s -B "$(cd "$broot" && ls tmp/wheels/pip-*.whl | sed 's|^|/|')/pip" install --quiet \
    --no-index --no-cache-dir --disable-pip-version-check --no-warn-script-location --no-compile \
    --find-links /tmp/wheels -r /tmp/wheels/requirements.txt
[ "$(in_root "$venv/bin/nri-pinner" --version)" = "nri-pinner $upstream" ] ||
    { echo "build-deb.sh: the built venv does not run" >&2; exit 1; }
# Man page and completions come from the argparse definitions of the code being packaged.
in_root "$venv/bin/python" -E -s -B -m nri_pinner.cli.man_and_completions man >"$build_dir/nri-pinner.1"
in_root "$venv/bin/python" -E -s -B -m nri_pinner.cli.man_and_completions bash >"$build_dir/nri-pinner.bash"
in_root "$venv/bin/python" -E -s -B -m nri_pinner.cli.man_and_completions zsh >"$build_dir/_nri-pinner"
t2=$(date +%s)

# 3. The staged tree.
rm -rf "$stage"
mkdir -p "$stage/DEBIAN" "$stage/usr/lib/nri-pinner" "$stage/usr/lib/systemd/system" "$stage/etc/nri-pinner" \
    "$stage/usr/bin" "$doc" "$stage/usr/share/man/man1" "$stage/usr/share/bash-completion/completions" \
    "$stage/usr/share/zsh/vendor-completions" "$stage/usr/share/lintian/overrides"
cp -a "$broot$venv" "$stage$venv"
rm -rf "$broot"
# Relative links (Debian policy within /usr); the interpreter is the suite's python$pyver, which
# the package depends on by exact minor version.
for link in "$stage$venv"/bin/python*; do
    [ -L "$link" ] || continue
    target=$(readlink "$link")
    case $target in /usr/bin/*) ln -sfn "../../../../bin/${target#/usr/bin/}" "$link" ;; esac
done
# Only the nri-pinner entry point: pyroute2's console scripts are not part of the product.
find "$stage$venv/bin" -type f ! -name nri-pinner -delete
rm -rf "$stage$venv/include" "$stage$venv/.gitignore"   # python3.13's venv writes a .gitignore
# Wheels ship data files with exec bits, and unstripped extension modules (what dh_strip does).
find "$stage$venv/lib" -type f -perm /111 ! -name '*.so' -exec chmod a-x {} +
find "$stage$venv/lib" -type f -name '*.so' -exec strip --strip-unneeded --remove-section=.comment \
    --remove-section=.note {} +
[ -z "$(find "$stage$venv" -name '*.pyc' -print -quit)" ] || { echo "build-deb.sh: .pyc in the stage" >&2; exit 1; }
install -m 0644 "$repo/systemd/nri-pinner.service" "$stage/usr/lib/systemd/system/nri-pinner.service"
# The NIC lookup service (the one process with a capability, CAP_SYS_ADMIN) starts with the plugin: a
# static Wants= link, so nothing is enabled for it and the maintainer scripts need not know it (its
# PartOf= carries the plugin's stop and restart to it).
install -m 0644 "$repo/systemd/nri-pinner-nic-lookup.service" "$stage/usr/lib/systemd/system/nri-pinner-nic-lookup.service"
mkdir -p "$stage/usr/lib/systemd/system/nri-pinner.service.wants"
ln -s ../nri-pinner-nic-lookup.service "$stage/usr/lib/systemd/system/nri-pinner.service.wants/nri-pinner-nic-lookup.service"
install -m 0644 "$repo/nri_pinner/config/default.toml" "$stage/etc/nri-pinner/config.toml"
install -D -m 0644 "$repo/packaging/deb/logrotate" "$stage/etc/logrotate.d/nri-pinner"
ln -s ../lib/nri-pinner/venv/bin/nri-pinner "$stage/usr/bin/nri-pinner"
gzip -9n <"$build_dir/nri-pinner.1" >"$stage/usr/share/man/man1/nri-pinner.1.gz"
install -m 0644 "$build_dir/nri-pinner.bash" "$stage/usr/share/bash-completion/completions/nri-pinner"
install -m 0644 "$build_dir/_nri-pinner" "$stage/usr/share/zsh/vendor-completions/_nri-pinner"
install -m 0644 "$repo/packaging/deb/copyright" "$doc/copyright"
install -m 0644 "$repo/packaging/deb/lintian-overrides" "$stage/usr/share/lintian/overrides/nri-pinner"
changelog_date=$(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")
sed -e "s/@VERSION@/$version/g" -e "s/@UPSTREAM@/$upstream/g" -e "s/@SUITE@/$suite/g" \
    -e "s/@DATE@/$changelog_date/g" "$repo/packaging/deb/changelog.in" | gzip -9n >"$doc/changelog.gz"

# 4. Control files: maintainer scripts, conffiles, md5sums (dpkg -V), control.
install -m 0644 "$repo/packaging/deb/conffiles" "$stage/DEBIAN/conffiles"
for script in preinst postinst prerm postrm; do
    install -m 0755 "$repo/packaging/deb/$script" "$stage/DEBIAN/$script"
done
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | LC_ALL=C sort |
    grep -vxF -f <(sed 's|^/||' DEBIAN/conffiles) | xargs -d '\n' md5sum >DEBIAN/md5sums)
chmod 0644 "$stage/DEBIAN/md5sums"
size_kib=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@INSTALLED_SIZE@/$size_kib/" -e "s/@PYVER@/$pyver/g" \
    "$repo/packaging/deb/control.in" >"$stage/DEBIAN/control"
find "$stage" -exec touch --no-dereference --date="@$SOURCE_DATE_EPOCH" {} +

# 5. The package: owned by root whoever builds it; gzip (xz saves 2 MB and costs a minute in CI).
dpkg-deb --root-owner-group -Zgzip --build "$stage" "$deb" >/dev/null
t3=$(date +%s)
echo "== $deb ($(du -h "$deb" | cut -f1)): wheels $((t1 - t0)) s, venv $((t2 - t1)) s, dpkg-deb $((t3 - t2)) s" >&2
echo "$deb"
