#!/bin/sh
# Runs INSIDE the guest (copied by tests/vm/guest.py to <out>/.job/job.sh for each boot; the image's
# nri-pinner-vm-job.service starts it after multi-user.target and powers off when it returns).
#
#   job.sh            run every part named in /out/.job/parts, in order, each in its own transient
#                     systemd service (so a timeout kills the part's whole process tree), then return
#   job.sh part NAME  (inside that service) run one part with the contract's environment
#
# Per part: /out/NAME/log (stdout+stderr), /out/NAME/exit (exit code; 124 = killed at PART_TIMEOUT),
# /out/NAME/seconds. /out/.job/env (shell, written by the host) holds VM_DRIVER, VM_TOPOLOGY,
# PART_TIMEOUT and the caller's extra variables.
set -u
JOB=/out/.job
REPO=/host/repo
PARTS_DIR=$REPO/tests/vm/parts

if [ "${1:-}" = part ]; then
    name=$2
    set -a
    . "$JOB/env"
    set +a
    export OUT="/out/$name" REPO PY=/opt/nri-pinner-vm/venv/bin/python
    export WORK="/var/tmp/vm-work/$name" HOME=/root TMPDIR=/tmp LANG=C.UTF-8
    export PATH="/opt/nri-pinner-vm/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    export PYTHONPATH=$REPO PYTHONPYCACHEPREFIX=/var/tmp/pycache
    export NRI_PINNER_E2E_WORKDIR=/var/tmp/nri-pinner-e2e-work
    mkdir -p "$WORK" "$NRI_PINNER_E2E_WORKDIR"
    cd "$WORK" || exit 1
    "$PARTS_DIR/$name" >"$OUT/log" 2>&1 </dev/null
    echo $? >"$OUT/exit"
    exit 0
fi

cut -d' ' -f1 /proc/uptime >"$JOB/started"   # the host times the boot by this file's appearance
. "$JOB/env"
echo "== vm job: $(wc -l <"$JOB/parts") part(s), topology $VM_TOPOLOGY, driver $VM_DRIVER," \
    "kernel $(uname -r), uptime $(cat "$JOB/started") s"
# Keep the kernel's CFS-bandwidth static key on for the whole job: a unit in a slice of its own (so no
# part sees system.slice's controllers change) with a quota that never throttles. Every container with a
# CPU limit turns that key on or off when it is the first or the last one, and the kernel re-patches its
# text each time; under multi-threaded TCG a vCPU once ran the breakpoint of such a patch after it was
# gone ("Oops: int3" in set_next_task_fair, 1 boot in 14, snc4 with the host loaded). With the key held
# on, container churn no longer patches that site.
systemd-run --quiet --unit=vm-cfs-bandwidth-held --slice=vm-held.slice --service-type=exec \
    -p CPUQuota="$(( $(nproc) * 100 ))%" sleep infinity </dev/null \
    && echo "== vm job: CFS bandwidth key held on ($(cat "/sys/fs/cgroup$(systemctl show -P ControlGroup \
        vm-cfs-bandwidth-held.service)/cpu.max" 2>&1))"
n=0
while read -r name; do
    [ -n "$name" ] || continue
    n=$((n + 1))
    out=/out/$name
    rm -rf "$out"
    mkdir -p "$out"
    echo "== part $name: start (timeout ${PART_TIMEOUT} s)"
    start=$(date +%s)
    systemd-run --quiet --wait --collect --unit="vm-part-$n" --service-type=exec \
        -p RuntimeMaxSec="$PART_TIMEOUT" -p TimeoutStopSec=15 -p KillMode=control-group \
        /bin/sh "$JOB/job.sh" part "$name" </dev/null
    took=$(( $(date +%s) - start ))
    echo "$took" >"$out/seconds"
    if [ ! -s "$out/exit" ]; then
        # killed at RuntimeMaxSec (or the unit could not start): the part's processes are gone with it
        echo "[vm job] part $name did not finish within PART_TIMEOUT=$PART_TIMEOUT s: killed" >>"$out/log"
        echo 124 >"$out/exit"
    fi
    echo "== part $name: exit $(cat "$out/exit") in $took s"
done <"$JOB/parts"
sync
date +%s >"$JOB/done"
echo "== vm job done"
