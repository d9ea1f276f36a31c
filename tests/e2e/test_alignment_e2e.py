"""Device and memory providers on real containerd (plumbing: this VM has one NUMA node, so the
alignment itself is proven in tests/engine/test_alignment.py).

A Guaranteed container gets this VM's PCI-backed disk as a read-only device node: the device
provider resolves it through real sysfs (/sys/dev/block/MAJ:MIN -> PCI function, numa_node
-1 here: no affinity), the Memory Manager places its memory limit, cpuset.mems is written and
read back from the container's process, and `status` shows every provider's hints.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .harness import PrivateContainerd
from .pinner import start_pinner
from .pods import resources_for


def pci_block_device() -> tuple[str, str]:
    """(MAJ:MIN, /dev path) of a block device with a PCI parent, or skip."""
    for link in sorted(Path("/sys/dev/block").iterdir()):
        real = os.path.realpath(link)
        dev = Path("/dev") / Path(real).name
        if "/pci" in real and dev.exists():
            return link.name, str(dev)
    pytest.skip("no PCI-backed block device on this host")


def mems_allowed_list(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Mems_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"/proc/{pid}/status has no Mems_allowed_list")


def test_device_and_memory_reach_the_providers(containerd: PrivateContainerd) -> None:
    _, path = pci_block_device()
    pinner = start_pinner(containerd, topology_manager={"policy": "single-numa-node"},
                          hints={"providers": ["cpu", "devices", "memory"]})
    pod = containerd.run_pod("guaranteed", 1000, 1000, containers=0)
    res = resources_for("guaranteed", 1000, 1000, None, None)
    cid = containerd.add_container(pod, "c0", res, devices=[("/dev/xdisk", path, "r")])
    pid = containerd.container_pid(cid)
    assert containerd.cpus_allowed_list(cid) == "1"
    assert mems_allowed_list(pid) == "0"
    a = pinner.assignment(cid)
    assert a["exclusive"] is True and a["mems"] == "0"
    hints = a["hints"]["provider_hints"]
    assert set(hints) >= {"cpu", "devices", "memory"}, hints
    assert list(hints["devices"].values()) == ["any"]  # numa_node -1 on this VM: no affinity
    assert hints["memory"]["memory"].startswith("{0}")
    table = pinner.status(as_json=False)
    assert "topology hints" in table and "devices[" in table
    print(f"\ncontainerd {containerd.version}: status with device and memory hints:\n{table}")
    containerd.remove_pod(pod)
