#!/usr/bin/env bash
# Build (once) the VM node tier's guest image: Debian trixie with systemd as PID 1, cgroup v2,
# containerd 1.7 (Debian) + 2.x (copied from the host's /opt/nri-pinner-e2e/containerd2), runc, hwloc,
# python3.13 and a venv with the project's runtime dependencies + pytest at /opt/nri-pinner-vm/venv.
# The project itself is not in the image: the guest mounts the working tree (tests/vm/guest.py).
#
# Output: $NRI_PINNER_VM_BUILD_DIR (default <repo>/build/vm)/image/{rootfs.img,vmlinuz,initrd.img,stamp}.
# Rebuilt only when an input changes: this script, the package list, the Python requirement pins, the
# containerd 2.x version. Idempotent; needs root (debootstrap, chroot). Prints the image directory on the
# last line of stdout; progress goes to stderr.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=${NRI_PINNER_VM_BUILD_DIR:-$repo/build/vm}
image=$build_dir/image
suite=trixie
containerd2=${NRI_PINNER_E2E_PREFIX:-/opt/nri-pinner-e2e}/containerd2
packages=(linux-image-amd64 initramfs-tools zstd systemd-sysv systemd udev dbus kmod containerd runc iproute2
          python3 python3-venv hwloc-nox procps busybox-static util-linux)
initramfs_modules=(virtio_pci virtio_blk ext4 9p 9pnet_virtio)
venv=/opt/nri-pinner-vm/venv
log() { echo "[vm-image +$SECONDS s] $*" >&2; }
die() { echo "build-image.sh: error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot)"
[ -x "$containerd2/usr/bin/containerd" ] || die "$containerd2/usr/bin/containerd missing: run scripts/install-runtimes.sh"

# One build at a time (concurrent callers wait, then find the image current).
mkdir -p "$build_dir"
exec 9>"$build_dir/.build.lock"
flock 9

# --- inputs and their hash ---------------------------------------------------------------------------
# Python pins: the runtime dependencies at the versions the host's dev venv runs (so the guest runs what
# the unit tests ran), else pyproject's bound; pytest and pytest-asyncio at pyproject's dev pins.
py=$repo/.venv/bin/python
[ -x "$py" ] || py=python3
requirements=$("$py" - "$repo/pyproject.toml" <<'EOF'
import importlib.metadata as md
import re
import sys
import tomllib

project = tomllib.load(open(sys.argv[1], "rb"))["project"]
out = []
for spec in project["dependencies"]:
    name = re.match(r"[A-Za-z0-9._-]+", spec).group(0)
    try:
        out.append(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        out.append(spec)
for spec in project["optional-dependencies"]["dev"]:
    if re.match(r"(pytest|pytest-asyncio)==", spec):
        out.append(spec)
print("\n".join(out))
EOF
)
inputs="script $(sha256sum "$0" | cut -d' ' -f1)
suite $suite
packages ${packages[*]}
modules ${initramfs_modules[*]}
requirements $(echo "$requirements" | tr '\n' ' ')
containerd2 $(cat "$containerd2/DEB_VERSION" 2>/dev/null || echo '?') $("$containerd2/usr/bin/containerd" --version)"
want=$(echo "$inputs" | sha256sum | cut -d' ' -f1)

if [ -f "$image/stamp" ] && [ "$(head -n1 "$image/stamp")" = "$want" ] &&
   [ -f "$image/rootfs.img" ] && [ -f "$image/vmlinuz" ] && [ -f "$image/initrd.img" ]; then
    log "image up to date ($want)"
    echo "$image"
    exit 0
fi
log "building the guest image (inputs $want)"
for tool in debootstrap mkfs.ext4 qemu-img; do
    command -v "$tool" >/dev/null || die "$tool missing (apt-get install debootstrap qemu-utils e2fsprogs)"
done

# --- the host's Debian mirror (deb822 entry), as packaging/image/base-root.sh finds it ----------------
mirror=http://deb.debian.org/debian
sources=/etc/apt/sources.list.d/debian.sources
if [ -r "$sources" ]; then
    found=$(awk '
        /^[[:space:]]*$/ { if (uris != "" && main) { print uris; exit } uris = ""; main = 0; next }
        /^URIs:/ { uris = $2 }
        /^Suites:/ { for (i = 2; i <= NF; i++) if ($i !~ /-(updates|security|backports)$/) main = 1 }
        END { if (uris != "" && main) print uris }' "$sources" | head -n1)
    [ -n "$found" ] && mirror=$found
fi

# --- wheels for the guest's python3.13, fetched on the host ------------------------------------------
wheels=$build_dir/wheels-$(echo "$requirements" | sha256sum | cut -c1-16)
if [ ! -f "$wheels/.complete" ]; then
    log "pip download (python 3.13 wheels) into $wheels"
    rm -rf "$wheels" && mkdir -p "$wheels"
    echo "$requirements" >"$wheels/requirements.txt"
    "$py" -m pip download -q --dest "$wheels" --only-binary=:all: --python-version 3.13 --implementation cp \
        --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform linux_x86_64 -r "$wheels/requirements.txt" >&2
    touch "$wheels/.complete"
fi

# --- the tree -----------------------------------------------------------------------------------------
tree=$build_dir/tree
mkdir -p "$build_dir"
cleanup() {
    for m in dev/pts proc; do mountpoint -q "$tree/$m" 2>/dev/null && umount -l "$tree/$m"; done
    return 0
}
trap cleanup EXIT
cleanup
rm -rf "$tree"
log "debootstrap $suite (minbase) from $mirror"
debootstrap --variant=minbase "$suite" "$tree" "$mirror" >&2 ||
    die "debootstrap failed"

mount -t proc proc "$tree/proc"
mount -t devpts devpts "$tree/dev/pts"
printf '#!/bin/sh\nexit 101\n' >"$tree/usr/sbin/policy-rc.d"  # nothing starts in the chroot
chmod 755 "$tree/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$tree/etc/resolv.conf"
# A small initramfs: only what finds the root disk and the 9p shares (loaded early, before fstab).
mkdir -p "$tree/etc/initramfs-tools/conf.d" "$tree/usr/share/initramfs-tools/modules.d"
echo "MODULES=list" >"$tree/etc/initramfs-tools/conf.d/nri-pinner-vm.conf"
printf '%s\n' "${initramfs_modules[@]}" >"$tree/usr/share/initramfs-tools/modules.d/nri-pinner-vm"
echo "deb $mirror $suite main" >"$tree/etc/apt/sources.list"
log "apt-get install ${packages[*]}"
in_tree() { chroot "$tree" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }
in_tree apt-get update -qq >&2
in_tree apt-get install -y -qq --no-install-recommends "${packages[@]}" >&2 2> >(grep -v 'debconf: ' >&2)

# containerd 2.x at the host's path, so tests/e2e/host_cleanup.find_runtime finds both runtimes
mkdir -p "$tree$(dirname "$containerd2")"
cp -a "$containerd2" "$tree$containerd2"

log "venv $venv (offline, $(ls "$wheels"/*.whl | wc -l) wheels)"
mkdir -p "$tree/opt/nri-pinner-vm/wheels"
cp "$wheels"/*.whl "$wheels/requirements.txt" "$tree/opt/nri-pinner-vm/wheels/"
in_tree python3 -m venv "$venv"
in_tree "$venv/bin/pip" install -q --no-index --find-links /opt/nri-pinner-vm/wheels \
    -r /opt/nri-pinner-vm/wheels/requirements.txt >&2
in_tree "$venv/bin/python" -c 'import grpc, google.protobuf, structlog, prometheus_client, pyroute2, jeepney, pytest'
rm -rf "$tree/opt/nri-pinner-vm/wheels"

# --- guest configuration --------------------------------------------------------------------------------
echo nri-pinner-vm >"$tree/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 nri-pinner-vm\n' >"$tree/etc/hosts"
: >"$tree/etc/resolv.conf"
# The working tree (read-only) and the results share, both 9p (tags: repo, out); nofail so a boot
# without them (scripts/vm/shell) still comes up.
mkdir -p "$tree/host/repo" "$tree/out"
cat >"$tree/etc/fstab" <<'EOF'
/dev/vda / ext4 rw,relatime 0 0
repo /host/repo 9p trans=virtio,version=9p2000.L,msize=262144,ro,nofail 0 0
out /out 9p trans=virtio,version=9p2000.L,msize=262144,nofail 0 0
EOF
# The job: runs /out/.job/job.sh (written per boot by tests/vm/guest.py), then powers off however it ended.
cat >"$tree/etc/systemd/system/nri-pinner-vm-job.service" <<'EOF'
[Unit]
Description=nri-pinner VM tier: run the parts from the /out share, then power off
After=multi-user.target containerd.service
RequiresMountsFor=/out /host/repo
ConditionPathExists=/out/.job/job.sh
SuccessAction=poweroff-force
FailureAction=poweroff-force

[Service]
Type=oneshot
ExecStart=/bin/sh /out/.job/job.sh
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF
# root logs in on the serial console without a password (scripts/vm/shell; no network, nothing exposed)
mkdir -p "$tree/etc/systemd/system/serial-getty@ttyS0.service.d"
cat >"$tree/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf" <<'EOF'
[Service]
ExecStart=
ExecStart=-/sbin/agetty --autologin root --keep-baud 115200,57600,38400,9600 - $TERM
EOF
in_tree systemctl enable nri-pinner-vm-job.service >&2
# The system containerd stays installed but off: the parts start their own (some enable this one).
in_tree systemctl disable containerd.service >&2
# No network in the guest: units that only wait for it or touch the clock over it are masked.
for unit in systemd-networkd-wait-online.service systemd-timesyncd.service apt-daily.timer \
            apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
    in_tree systemctl mask "$unit" >/dev/null 2>&1 || true
done
echo 'PATH="/opt/nri-pinner-vm/venv/bin:$PATH"' >"$tree/etc/profile.d/nri-pinner-vm.sh"
rm -f "$tree/usr/sbin/policy-rc.d"
cleanup

# --- kernel, initrd, root filesystem ---------------------------------------------------------------------
out=$build_dir/image.partial
rm -rf "$out" && mkdir -p "$out"
vmlinuz=$(ls "$tree"/boot/vmlinuz-* | sort -V | tail -n1)
initrd=$(ls "$tree"/boot/initrd.img-* | sort -V | tail -n1)
cp "$vmlinuz" "$out/vmlinuz"
cp "$initrd" "$out/initrd.img"
rm -rf "$tree"/var/lib/apt/lists/* "$tree"/var/cache/apt/*.bin "$tree"/var/cache/apt/archives/*.deb \
    "$tree"/usr/share/doc/* "$tree"/usr/share/man/* "$tree"/usr/share/info/*
mkfs.ext4 -q -L nri-pinner-vm -d "$tree" "$out/rootfs.img" 6G >&2
{
    echo "$want"
    echo "$inputs"
    echo "kernel $(basename "$vmlinuz")"
    echo "built $(date -u +%FT%TZ) in $SECONDS s"
} >"$out/stamp"
rm -rf "$image" && mv "$out" "$image"
rm -rf "$tree"
log "image ready in $SECONDS s: $(du -sh --apparent-size "$image/rootfs.img" | cut -f1) sparse," \
    "$(du -sh "$image/rootfs.img" | cut -f1) allocated, kernel $(basename "$vmlinuz")"
echo "$image"
