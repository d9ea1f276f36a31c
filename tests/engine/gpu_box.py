"""The GPU box the alignment engine tests share: a sysfs tree with 2 NUMA nodes x 4 cores x 2 threads
(CPUs 0-7 node 0, 8-15 node 1), a memory-only node 2 (nearest node 1) and GPUs from
scripts/gen_sysfs_devices.py (195:1 on node 1), and an engine over it."""

from __future__ import annotations

from pathlib import Path

from nri_pinner.config import from_mapping
from nri_pinner.engine.admission_engine import Engine
from nri_pinner.engine.memorymanager.provider import build_policy
from nri_pinner.engine.topology.memory import read_node_memory
from nri_pinner.engine.topology.sysfs import discover
from testkit.scripts import load_script

GB = 1 << 30

gen, devgen = load_script("gen_sysfs"), load_script("gen_sysfs_devices")


def write_gpu_box(root: Path) -> Path:
    gen.write_tree(root, gen.Shape(sockets=2, cores_per_numa=4, cpuless_nodes=1, l1_l2_files=False,
                                   distances=((10, 21, 30), (21, 10, 15), (30, 15, 10))))
    devgen.gpu_box(root)
    return root


def engine_for(root: Path, policy: str, *, memory: bool = True, options: tuple[str, ...] = (),
               reserved_memory: str = "") -> Engine:
    """CPUs 0 and 8 reserved; the cpu and devices providers, and memory (with hugepages) when asked."""
    topo = discover(root)
    settings = from_mapping({
        "cpu_manager": {"reserved_cpus": "0,8"},
        "topology_manager": {"policy": policy, "policy_options": list(options)},
        "hints": {"providers": ["cpu", "devices", "memory"] if memory else ["cpu", "devices"]},
        "memory_manager": {"reserved_memory": reserved_memory}})
    mm = None
    if memory:
        nodes = read_node_memory(root)
        mm = build_policy(topo.numa_nodes, {n.node: n.memory_bytes for n in nodes},
                          {n.node: {f"hugepages-{p >> 20}Mi" if p < GB else f"hugepages-{p >> 30}Gi": b
                                    for p, b in n.hugepages.items()} for n in nodes},
                          distances={n.node: n.distances for n in nodes})
    return Engine.from_settings(settings, topo, memory=mm)
