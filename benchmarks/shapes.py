"""The synthetic machines the benchmarks share (built in-process; no sysfs fixtures needed)."""

from __future__ import annotations

from nri_pinner.engine.topology.model import CPUInfo, Topology


def machine(sockets: int, numa_per_socket: int, cores_per_numa: int, threads: int) -> Topology:
    """Linux-style numbering (thread t of core k is CPU k + t * cores; core ids within the socket),
    one L3 per NUMA node, SLIT-like distances (10 local, 12 same socket, 32 remote)."""
    total_cores = sockets * numa_per_socket * cores_per_numa
    cores_per_socket = numa_per_socket * cores_per_numa
    cpus = []
    for cpu in range(total_cores * threads):
        core = cpu % total_cores
        numa = core // cores_per_numa
        cpus.append(CPUInfo(cpu=cpu, socket=numa // numa_per_socket, core=core % cores_per_socket,
                            numa=numa, l3=numa))
    nodes = range(sockets * numa_per_socket)
    distances = {a: {b: 10 if a == b else (12 if a // numa_per_socket == b // numa_per_socket else 32)
                     for b in nodes} for a in nodes}
    return Topology(cpus=tuple(cpus), numa_distances=distances)
