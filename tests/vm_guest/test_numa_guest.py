"""NUMA placement on the guest's real NUMA nodes (2s2c2t: node0 = CPUs 0-3, node1 = 4-7; snc4: four
nodes of four CPUs). CPU 0 is reserved, so node 0 has one CPU too few for a node-sized request."""

from __future__ import annotations

import pytest

from nri_pinner.engine.cpuset import CPUSet
from tests.e2e.harness import PrivateContainerd
from tests.e2e.pinner import start_pinner, wait_for

from .node import nodes_of, numa_nodes, status_field

MIB = 1024 * 1024


def _node_size() -> int:
    nodes = numa_nodes()
    if len(nodes) < 2:
        pytest.skip(f"needs two NUMA nodes with CPUs, this node has {len(nodes)}")
    sizes = {len(c) for c in nodes.values()}
    assert len(sizes) == 1, f"unequal NUMA nodes {nodes}"
    return sizes.pop()


def test_guaranteed_container_on_node1_gets_node1_memory(containerd: PrivateContainerd) -> None:
    """4 CPUs on 4-CPU nodes, node 0 short of one (CPU 0 reserved): single-numa-node puts the container
    on node 1; its memory request is placed there by the memory provider, and cpuset.mems follows.
    The Burstable neighbour's mems are the nodes of its (shrunk) shared pool ("aligned")."""
    size = _node_size()
    node1 = numa_nodes()[1]
    pinner = start_pinner(containerd, topology_manager={"policy": "single-numa-node"},
                          hints={"providers": ["cpu", "memory"]})
    burst = containerd.run_pod("burstable", 250, 500)
    (b,) = burst.container_ids
    guar = containerd.run_pod("guaranteed", size * 1000, size * 1000, memory_limit=256 * MIB)
    (g,) = guar.container_ids
    pid = containerd.container_pid(g)
    assert containerd.cpus_allowed_list(g) == str(node1) and containerd.cgroup_cpuset(g) == str(node1)
    assert status_field(pid, "Mems_allowed_list") == "1"
    assert (containerd.cgroup_dir(g) / "cpuset.mems").read_text().strip() == "1"
    a = pinner.assignment(g)
    assert (a["exclusive"], a["cpus"], a["mems"]) == (True, str(node1), "1")
    assert a["hints"]["merged"] == {"numa": [1], "preferred": True}
    hints = a["hints"]["provider_hints"]
    # the memory request fits either node alone: node 1 is among the memory provider's preferred hints
    assert "{1}" in hints["memory"]["memory"].split(), hints
    shared = CPUSet.parse(containerd.cpus_allowed_list(b))
    assert shared.isdisjoint(node1)
    want_mems = str(nodes_of(shared))
    assert wait_for(lambda: (containerd.cgroup_dir(b) / "cpuset.mems").read_text().strip() == want_mems, timeout=5)
    assert status_field(containerd.container_pid(b), "Mems_allowed_list") == want_mems
    print(f"\ncontainerd {containerd.version}: {size}-CPU Guaranteed on {a['cpus']} mems {a['mems']}; "
          f"Burstable neighbour on {shared} mems {want_mems}")
    containerd.remove_pod(guar)
    containerd.remove_pod(burst)


def test_single_numa_node_refuses_a_request_spanning_nodes(containerd: PrivateContainerd) -> None:
    """A Guaranteed request bigger than any NUMA node fails its create with the kubelet's
    TopologyAffinityError (NRI error -> CRI CreateContainer error); one that fits is admitted on one node."""
    size = _node_size()
    pinner = start_pinner(containerd, topology_manager={"policy": "single-numa-node"})
    with pytest.raises(Exception, match=r"nri-pinner: TopologyAffinityError"):
        containerd.run_pod("guaranteed", (size + 2) * 1000, (size + 2) * 1000)
    # the refusal holds nothing: every allocatable CPU is still shared
    assert pinner.status()["pools"]["exclusive"] == ""
    guar = containerd.run_pod("guaranteed", size * 1000, size * 1000)
    (g,) = guar.container_ids
    got = CPUSet.parse(containerd.cpus_allowed_list(g))
    assert len(got) == size and len(nodes_of(got)) == 1, got
    assert got == numa_nodes()[1]  # node 0 is one short (CPU 0 reserved)
    assert pinner.assignment(g)["hints"]["merged"] == {"numa": [1], "preferred": True}
    containerd.remove_pod(guar)
