#!/usr/bin/env bash
# A host load like the one under which the VM tier's guest oopsed with multi-threaded TCG: package
# downloads and unpacking (debootstrap), apt, a parallel C compile and a Go build (many threads and
# short-lived compiler processes), side by side, until killed.
# A steady CPU burner did not reproduce it (0 of 10 boots); this bursty mix of many short processes,
# disk writes and page-cache churn did. Used by `python -m tests.vm soak --load scripts/vm/host-load.sh`
# (docs/vm-tier.md "Single-threaded TCG"). Needs root and the Debian mirror (it installs golang-go if
# missing); writes only under $work.
set -uo pipefail
work=$(mktemp -d /var/tmp/nri-pinner-host-load.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$work"' EXIT
mirror=${NRI_PINNER_LOAD_MIRROR:-http://deb.debian.org/debian}

debootstrap_loop() {  # download + unpack a minbase tree, again and again
    local n=0
    while :; do
        n=$((n + 1))
        debootstrap --variant=minbase trixie "$work/tree-$n" "$mirror" >"$work/debootstrap.log" 2>&1 ||
            echo "debootstrap run $n failed (exit $?)"
        rm -rf "$work/tree-$n"
    done
}

apt_loop() {  # apt's index work and .deb unpacking
    mkdir -p "$work/debs"
    while :; do
        apt-get update -qq >/dev/null 2>&1
        (cd "$work/debs" && apt-get download -qq gcc-12 cpp-12 libpython3.11-stdlib >/dev/null 2>&1)
        for deb in "$work"/debs/*.deb; do
            [ -e "$deb" ] && dpkg-deb -x "$deb" "$work/unpacked"
        done
        rm -rf "$work/unpacked" "$work"/debs/*.deb
    done
}

compile_loop() {  # two compilers at a time over generated sources
    mkdir -p "$work/cc"
    for i in $(seq 1 40); do
        {
            echo "#include <stdio.h>"
            for f in $(seq 1 150); do
                echo "static double f$f(double x) { double s = 0; for (int i = 0; i < $f; i++) s += x * i / ($f + 1.0); return s; }"
            done
            echo "int main(void) { double t = 0;"
            for f in $(seq 1 150); do echo "t += f$f($i.0);"; done
            echo "printf(\"%f\\n\", t); return 0; }"
        } >"$work/cc/unit$i.c"
    done
    while :; do
        find "$work/cc" -name '*.c' -print0 | xargs -0 -P2 -I{} gcc -O2 -c {} -o {}.o
        rm -f "$work"/cc/*.o
    done
}

go_loop() {  # rebuild Go's standard library from scratch: a threaded compiler, hundreds of processes
    command -v go >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null 2>&1
    export GOCACHE="$work/gocache" GOPATH="$work/gopath" GOFLAGS=-buildvcs=false
    while :; do
        rm -rf "$GOCACHE"
        go build -a std >/dev/null 2>&1 || echo "go build failed (exit $?)"
    done
}

debootstrap_loop &
apt_loop &
compile_loop &
go_loop &
wait
