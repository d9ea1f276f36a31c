#!/usr/bin/env bash
# Install the two real runtimes the end-to-end tests run against, without a registry:
#   * containerd 1.7.x from Debian trixie (system package, pinned low so nothing else comes from trixie),
#     plus runc, busybox-static (image content) and the CRI api.proto (golang-github-kubernetes-cri-api-dev);
#   * containerd 2.x from Debian sid, fetched with a PRIVATE apt state and unpacked into
#     $PREFIX/containerd2 (sid is never added to the machine's sources; nothing of it is dpkg-installed);
#   * kubectl from Debian trixie (package kubectl, what trixie's kubernetes-client depends on), unpacked
#     into $PREFIX/kubectl for the Kubernetes manifest tests (`kubectl kustomize`; it runs on bookworm).
#     Unpacked, not installed: a kubectl from another vendor may own /usr/bin/kubectl.
# Idempotent: a second run only checks. Set NRI_PINNER_E2E_REFRESH=1 to re-fetch sid's containerd.
# Needs root and a Debian bookworm machine whose apt sources are a deb822 file.
set -euo pipefail

PREFIX="${NRI_PINNER_E2E_PREFIX:-/opt/nri-pinner-e2e}"
DEBIAN_SOURCES="${NRI_PINNER_E2E_DEBIAN_SOURCES:-/etc/apt/sources.list.d/debian.sources}"
TRIXIE_SOURCES=/etc/apt/sources.list.d/nri-pinner-e2e-trixie.sources
TRIXIE_PIN=/etc/apt/preferences.d/nri-pinner-e2e-trixie
SID_DIR="$PREFIX/apt-sid"
CONTAINERD2_DIR="$PREFIX/containerd2"
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export DEBIAN_FRONTEND=noninteractive

started=$SECONDS
step_started=$SECONDS
log() { echo "[install-runtimes +$((SECONDS - started))s] $*"; }
step_done() { log "$1 done in $((SECONDS - step_started))s"; step_started=$SECONDS; }
die() { echo "install-runtimes: error: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (installs packages into the system)"
[[ -r $DEBIAN_SOURCES ]] || die "$DEBIAN_SOURCES not found: need the machine's deb822 Debian entry to copy URIs/Signed-By"

# Field $2 of the first deb822 stanza in $1 whose Suites list contains the word $3.
deb822_field() {
    awk -v want="$2" -v suite="$3" '
        function flush() { if (hit && value != "") { print value; found = 1; exit } hit = 0; value = "" }
        /^[[:space:]]*$/ { flush(); next }
        /^#/ { next }
        {
            split($0, kv, ":"); key = kv[1]; rest = substr($0, length(key) + 2); sub(/^[[:space:]]+/, "", rest)
            if (key == "Suites") { n = split(rest, s, /[[:space:]]+/); for (i = 1; i <= n; i++) if (s[i] == suite) hit = 1 }
            if (key == want) value = rest
        }
        END { if (!found) flush() }' "$1"
}

URIS="$(deb822_field "$DEBIAN_SOURCES" URIs bookworm)"
SIGNED_BY="$(deb822_field "$DEBIAN_SOURCES" Signed-By bookworm)"
[[ -n $URIS ]] || die "no 'URIs:' in the bookworm stanza of $DEBIAN_SOURCES"
[[ -n $SIGNED_BY ]] || die "no 'Signed-By:' in the bookworm stanza of $DEBIAN_SOURCES"
log "Debian mirror: $URIS (Signed-By: $SIGNED_BY)"

# Write $2 to file $1 only if it differs; return 0 if it changed.
write_if_changed() {
    if [[ -f $1 ]] && [[ "$(cat "$1")" == "$2" ]]; then return 1; fi
    printf '%s\n' "$2" >"$1"
    log "wrote $1"
}

# --- 1. trixie entry (low pin) + system packages ------------------------------------------------------
need_update=0
write_if_changed "$TRIXIE_SOURCES" "Types: deb
URIs: $URIS
Suites: trixie
Components: main
Signed-By: $SIGNED_BY" && need_update=1
write_if_changed "$TRIXIE_PIN" "# nri-pinner e2e: only packages asked for as pkg/trixie come from trixie
Package: *
Pin: release n=trixie
Pin-Priority: 100" || true
if ! apt-cache madison containerd 2>/dev/null | grep -q ' trixie/'; then need_update=1; fi
if [[ $need_update -eq 1 ]]; then
    apt-get update -qq
fi
step_done "apt sources"

SYSTEM_PKGS=(containerd/trixie runc busybox-static golang-github-kubernetes-cri-api-dev)
installed_ok() {
    local v
    v="$(dpkg-query -W -f='${db:Status-Abbrev}${Version}' containerd 2>/dev/null || true)"
    [[ $v == ii* && ${v#ii } == 1.7.* ]] || return 1
    for p in runc busybox-static golang-github-kubernetes-cri-api-dev; do
        dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || return 1
    done
}
containerd_pids_before="$(pgrep -x containerd || true)"
if installed_ok; then
    log "system packages already installed"
else
    # --no-install-recommends: containerd recommends nothing we need; keeps the machine lean.
    apt-get install -y -qq --no-install-recommends "${SYSTEM_PKGS[@]}"
fi
installed_ok || die "containerd 1.7 / runc / busybox-static / cri-api not installed after apt-get install"
# Nothing may auto-start a system containerd that would fight the private ones (no systemd here, and
# /usr/sbin/policy-rc.d usually forbids starts; check anyway).
for pid in $(pgrep -x containerd || true); do
    if ! grep -qw "$pid" <<<"$containerd_pids_before" && ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- '--config'; then
        die "a system containerd (pid $pid) was started by the package install; stop it before running e2e tests"
    fi
done
log "containerd 1.7: $(dpkg-query -W -f='${Version}' containerd) ($(/usr/bin/containerd --version))"
log "runc: $(dpkg-query -W -f='${Version}' runc); busybox-static: $(dpkg-query -W -f='${Version}' busybox-static)"
[[ -x /bin/busybox ]] || die "/bin/busybox missing after installing busybox-static"
CRI_PROTO=/usr/share/gocode/src/k8s.io/cri-api/pkg/apis/runtime/v1/api.proto
[[ -r $CRI_PROTO ]] || die "$CRI_PROTO missing after installing golang-github-kubernetes-cri-api-dev"
step_done "system packages"

# --- 2. containerd 2.x from sid, private apt state ----------------------------------------------------
if [[ -x $CONTAINERD2_DIR/usr/bin/containerd && -z ${NRI_PINNER_E2E_REFRESH:-} ]]; then
    log "containerd 2.x already unpacked in $CONTAINERD2_DIR"
else
    mkdir -p "$SID_DIR/lists/partial" "$SID_DIR/cache/archives/partial" "$SID_DIR/prefs.d" "$SID_DIR/debs"
    echo "deb [signed-by=$SIGNED_BY] $URIS sid main" >"$SID_DIR/sid.list"
    SID_APT=(
        -o "Dir::Etc::sourcelist=$SID_DIR/sid.list" -o "Dir::Etc::sourceparts=-"
        -o "Dir::Etc::preferences=/dev/null" -o "Dir::Etc::preferencesparts=$SID_DIR/prefs.d"
        -o "Dir::State::Lists=$SID_DIR/lists" -o "Dir::Cache=$SID_DIR/cache"
        -o "APT::Get::List-Cleanup=0"
    )
    apt-get "${SID_APT[@]}" update -qq
    sid_version="$(apt-cache "${SID_APT[@]}" show containerd | awk '/^Version:/ { print $2; exit }')"
    [[ $sid_version == 2.* ]] || die "sid's containerd is '$sid_version', expected 2.x"
    rm -f "$SID_DIR"/debs/containerd_*.deb
    # Downloading into a root-owned dir makes apt warn "Download is performed unsandboxed as root": harmless.
    (cd "$SID_DIR/debs" && apt-get "${SID_APT[@]}" download -qq "containerd=$sid_version" 2>&1 |
        grep -v 'unsandboxed as root' || true)
    deb="$(ls "$SID_DIR"/debs/containerd_*.deb)"
    rm -rf "$CONTAINERD2_DIR.tmp" && mkdir -p "$CONTAINERD2_DIR.tmp"
    dpkg-deb -x "$deb" "$CONTAINERD2_DIR.tmp"
    echo "$sid_version" >"$CONTAINERD2_DIR.tmp/DEB_VERSION"
    rm -rf "$CONTAINERD2_DIR" && mv "$CONTAINERD2_DIR.tmp" "$CONTAINERD2_DIR"
fi
for bin in containerd ctr containerd-shim-runc-v2; do
    [[ -x $CONTAINERD2_DIR/usr/bin/$bin ]] || die "$CONTAINERD2_DIR/usr/bin/$bin missing"
done
log "containerd 2.x: deb $(cat "$CONTAINERD2_DIR/DEB_VERSION" 2>/dev/null || echo '?')" \
    "($("$CONTAINERD2_DIR/usr/bin/containerd" --version))"
step_done "containerd 2.x"

# --- 3. kubectl from trixie, unpacked ---------------------------------------------------------------
KUBECTL_DIR="$PREFIX/kubectl"
trixie_kubectl="$(apt-cache madison kubectl | awk -F'|' '$3 ~ / trixie\// { gsub(/ /, "", $2); print $2; exit }')"
[[ -n $trixie_kubectl ]] || die "no kubectl in trixie's package lists (apt-get update?)"
if [[ -x $KUBECTL_DIR/usr/bin/kubectl && "$(cat "$KUBECTL_DIR/DEB_VERSION" 2>/dev/null)" == "$trixie_kubectl" ]]; then
    log "kubectl $trixie_kubectl already unpacked in $KUBECTL_DIR"
else
    rm -rf "$KUBECTL_DIR.tmp" && mkdir -p "$KUBECTL_DIR.tmp/deb"
    (cd "$KUBECTL_DIR.tmp/deb" && apt-get download -qq "kubectl=$trixie_kubectl" 2>&1 |
        grep -v 'unsandboxed as root' || true)
    dpkg-deb -x "$KUBECTL_DIR.tmp"/deb/kubectl_*.deb "$KUBECTL_DIR.tmp"
    rm -rf "$KUBECTL_DIR.tmp/deb" "$KUBECTL_DIR.tmp/usr/share"
    echo "$trixie_kubectl" >"$KUBECTL_DIR.tmp/DEB_VERSION"
    rm -rf "$KUBECTL_DIR" && mv "$KUBECTL_DIR.tmp" "$KUBECTL_DIR"
fi
"$KUBECTL_DIR/usr/bin/kubectl" kustomize --help >/dev/null || die "$KUBECTL_DIR/usr/bin/kubectl has no kustomize"
log "kubectl: deb $trixie_kubectl ($("$KUBECTL_DIR/usr/bin/kubectl" version --client | head -n1))"
step_done "kubectl"

# --- 4. CRI python stubs (needs the dev venv's grpcio-tools) ------------------------------------------
PYTHON="${PYTHON:-$REPO_DIR/.venv/bin/python}"
if [[ -x $PYTHON ]] && "$PYTHON" -c 'import grpc_tools' 2>/dev/null; then
    "$PYTHON" "$REPO_DIR/tests/e2e/cri_stubs.py"
    step_done "CRI stubs"
else
    log "skipping CRI stub generation: no python with grpcio-tools at $PYTHON (the tests generate them lazily)"
fi
log "all done in $((SECONDS - started))s"
