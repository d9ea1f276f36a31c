"""A CPU coming online joins the shared pool at once, through the syncer's cgroup writes.

This VM cannot hotplug CPUs for real: the sysfs tree the service reads is built by the test (its
`online` file is what changes), while the announcement is a real kernel uevent on a real netlink
socket — the test makes the kernel send one by writing "change" to a CPU's `uevent` file (root).
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest
from svc_harness import DUAL_SOCKET, container, copy_sysfs, create, make_settings, pod, running, write_cgroup_cpus

from nri_pinner.edge.watch.uevents import is_cpu_event, open_socket, parse, watch_cpus
from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.nri.gen import api_pb2 as api
from testkit.fake_runtime import CONTAINERD_1_7_24

BPOD, GPOD = pod("burst", "burstable"), pod("gold")
B, G = container(BPOD, "app", 100), container(GPOD, "app", 2000, 2000)
KERNEL_TRIGGER = Path("/sys/devices/system/cpu/cpu0/uevent")


def set_online(sysfs: Path, online: CPUSet) -> None:
    cpu = sysfs / "sys/devices/system/cpu"
    possible = CPUSet.parse((cpu / "possible").read_text())
    (cpu / "online").write_text(f"{online}\n")
    (cpu / "offline").write_text(f"{possible - online}\n")


def cgroup_cpus(root: Path, c: api.Container) -> CPUSet:
    return CPUSet.parse((root / "cpuset" / c.linux.cgroups_path.strip("/") / "cpuset.cpus").read_text())


def test_kernel_uevents_are_parsed_and_only_cpu_ones_count() -> None:
    online = (b"online@/devices/system/cpu/cpu3\0ACTION=online\0DEVPATH=/devices/system/cpu/cpu3\0"
              b"SUBSYSTEM=cpu\0SEQNUM=9")
    event = parse(online)
    assert event == {"ACTION": "online", "DEVPATH": "/devices/system/cpu/cpu3", "SUBSYSTEM": "cpu", "SEQNUM": "9"}
    assert is_cpu_event(event)
    assert not is_cpu_event(parse(b"add@/devices/virtual/net/veth0\0ACTION=add\0SUBSYSTEM=net\0"))
    assert not is_cpu_event(parse(b"bind@/devices/system/cpu/cpu3\0ACTION=bind\0SUBSYSTEM=cpu\0"))
    assert parse(b"garbage without fields") == {}


def kernel_can_announce() -> str:
    if os.geteuid() != 0 or not os.access(KERNEL_TRIGGER, os.W_OK):
        return "needs root and a writable /sys to make the kernel send a uevent"
    sock = open_socket()
    if sock is None:
        return "cannot open the kernel uevent socket here"
    sock.close()
    return ""


@pytest.mark.skipif(bool(kernel_can_announce()), reason=kernel_can_announce() or "-")
async def test_a_cpu_coming_online_grows_the_pool_through_the_syncer(workdir: Path) -> None:
    sysfs = copy_sysfs(DUAL_SOCKET, workdir / "sysfs")
    full = CPUSet.parse((sysfs / "sys/devices/system/cpu/online").read_text())
    back = max(full)
    set_online(sysfs, full - CPUSet([back]))  # the service starts with one CPU offline
    settings = make_settings(workdir, sysfs=sysfs)  # no repair timer: only the uevent can do it
    cgroups = Path(settings.reconcile.cgroup_root)
    async with running(settings, CONTAINERD_1_7_24) as r:
        for p, c in ((BPOD, B), (GPOD, G)):
            reply = await r.conn.create_container(create(p, c))
            assert reply is not None
            write_cgroup_cpus(cgroups, c, reply.adjust.linux.resources.cpu.cpus)
            await r.conn.state_change(api.START_CONTAINER, p, c)
        exclusive = cgroup_cpus(cgroups, G)
        assert back not in cgroup_cpus(cgroups, B) and len(exclusive) == 2

        sock = open_socket()
        assert sock is not None
        watcher = asyncio.create_task(watch_cpus(sock, r.svc.reconciler.cpus_changed))
        try:
            set_online(sysfs, full)
            await asyncio.sleep(0.05)  # the reader is registered on the loop
            KERNEL_TRIGGER.write_text("change")  # a real uevent (SUBSYSTEM=cpu, ACTION=change)
            for _ in range(200):  # bounded wait, not a timing assertion
                if cgroup_cpus(cgroups, B) == full - exclusive:
                    break
                await asyncio.sleep(0.05)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        assert cgroup_cpus(cgroups, B) == full - exclusive  # written into the cgroup by the syncer
        assert cgroup_cpus(cgroups, G) == exclusive
        assert r.svc.plugin.node.engine.topology.online == full
        assert r.svc.reconciler.repairs == 0  # not the repair path: the pool change itself
        assert r.conn.updates == []  # and no NRI update


async def test_a_burst_of_uevents_is_one_look_and_a_failing_look_does_not_stop_the_watcher() -> None:
    # A socketpair stands in for the kernel socket here: what is tested is the coalescing loop.
    ours, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ours.setblocking(False)
    looks: list[int] = []

    async def changed() -> None:
        looks.append(len(looks))
        if len(looks) == 1:
            raise RuntimeError("sysfs unreadable this once")

    watcher = asyncio.create_task(watch_cpus(ours, changed, settle=0.05))
    try:
        await asyncio.sleep(0.01)
        for n in range(5):
            kernel.send(f"online@/devices/system/cpu/cpu{n}\0ACTION=online\0SUBSYSTEM=cpu\0".encode())
        kernel.send(b"add@/devices/virtual/net/x\0ACTION=add\0SUBSYSTEM=net\0")
        for _ in range(100):
            if looks:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        assert looks == [0]  # five messages, one look
        kernel.send(b"add@/devices/virtual/net/y\0ACTION=add\0SUBSYSTEM=net\0")
        await asyncio.sleep(0.15)
        assert looks == [0]  # not a CPU event
        kernel.send(b"offline@/devices/system/cpu/cpu1\0ACTION=offline\0SUBSYSTEM=cpu\0")
        for _ in range(100):
            if len(looks) == 2:
                break
            await asyncio.sleep(0.02)
        assert looks == [0, 1]  # still watching after the failed look
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        kernel.close()
