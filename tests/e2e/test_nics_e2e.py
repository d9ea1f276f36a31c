"""NIC hints on real containerd (plumbing): RunPodSandbox reaches the NIC lookup, the pod annotation
names a host interface, and `status` shows it with the PCI function read from this VM's sysfs.

This VM has one NUMA node and its NIC has no NUMA affinity (numa_node -1), and the e2e pods run in
the host network (no CNI here), so alignment itself is proven in tests/service/test_nic_*.py (fixture sysfs, real
pod namespaces); here the pod must still be pinned and the NIC must give no constraint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .harness import PrivateContainerd
from .pinner import start_pinner, wait_for


def _host_nic() -> tuple[str, str] | None:
    """A host interface on PCI and its PCI address, from the real /sys."""
    for name in sorted(os.listdir("/sys/class/net")):
        device = f"/sys/class/net/{name}/device"
        if not os.path.exists(device):
            continue
        real = os.path.realpath(device)
        for part in reversed(real.split("/")):
            if part.count(":") == 2 and "." in part:
                return name, part
    return None


def test_annotated_host_network_pod_shows_its_nic(containerd: PrivateContainerd) -> None:
    nic = _host_nic()
    pinner = start_pinner(containerd, hints={"providers": ["cpu", "nics"]},
                          topology_manager={"policy": "single-numa-node"})
    annotations = {"nri-pinner.io/nics": nic[0]} if nic else {}
    guar = containerd.run_pod("guaranteed", 1000, 1000, annotations=annotations)
    plain = containerd.run_pod("besteffort")
    (g,) = guar.container_ids
    assert containerd.cpus_allowed_list(g) == "1" and pinner.assignment(g)["exclusive"] is True

    def entries() -> dict[str, Any]:
        return {e.get("pod"): e for e in pinner.status().get("nics", []) if not e.get("pending")}

    assert wait_for(lambda: {guar.uid, plain.uid} <= set(entries())), pinner.status().get("nics")
    mine, other = entries()[guar.uid], entries()[plain.uid]
    assert other["links"] == [] and other["hints"] == [] and not other["problem"]
    if nic is not None:
        (link,) = mine["links"]
        assert (link["name"], link["pci"]) == nic and not mine["problem"], mine
        numa = Path(f"/sys/bus/pci/devices/{nic[1]}/numa_node").read_text().strip()
        assert link["numa"] == (None if numa == "-1" else int(numa))
    table = pinner.status(as_json=False)
    assert "pod NICs (NUMA hints):" in table
    print(f"\ncontainerd {containerd.version}: {table[table.index('pod NICs'):]}")
    containerd.remove_pod(guar)
    containerd.remove_pod(plain)
    assert wait_for(lambda: guar.uid not in entries())
