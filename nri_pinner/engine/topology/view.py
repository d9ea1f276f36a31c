"""Plain-text picture of a Topology: socket → (die) → NUMA node → (L3) → core → threads.

Used by ``nri-pinner topology`` and, with ``owners``, as the CPU map in ``status``.
Levels that add nothing are folded: dies only when a socket has several, L3 groups
as their own level only when a NUMA node holds several (else named on the node line).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..cpuset import CPUSet
from .model import Topology

ISOLATED_MARK = "(iso)"
OFFLINE_MARK = "(off)"
UNOWNED = "-"


def render_topology(topo: Topology, owners: Mapping[int, str] | None = None) -> str:
    lines = [_summary(topo)]
    multi_die = any(len({d for s, d in topo.die_cpus if s == sock}) > 1 for sock in topo.sockets)
    split_l3 = any(len({topo.by_cpu[c].l3 for c in cpus}) > 1 for cpus in topo.numa_cpus.values())
    for sock in topo.sockets:
        lines.append(f"socket {sock}")
        dies = sorted(d for s, d in topo.die_cpus if s == sock) if multi_die else [None]
        for die in dies:
            scope = topo.socket_cpus[sock] if die is None else topo.die_cpus[(sock, die)]
            indent = "  "
            if die is not None:
                lines.append(f"{indent}die {die}")
                indent += "  "
            for node in topo.numa_nodes:
                in_node = topo.numa_cpus[node] & scope
                if in_node:
                    lines.append(indent + _node_line(topo, node, in_node, show_l3=not split_l3))
                    lines.extend(_node_body(topo, in_node, indent + "  ", split_l3, owners))
    marks = []
    if topo.kind_cpus:
        marks.append("[K] core kind " + ", ".join(f"{k}: {c}" for k, c in topo.kind_cpus.items()))
    if topo.isolated:
        marks.append(f"{ISOLATED_MARK} isolated")
    if topo.online != topo.all_cpus:
        marks.append(f"{OFFLINE_MARK} offline")
    if owners is not None:
        marks.append(f"cpu=owner; {UNOWNED} = shared pool")
    if marks:
        lines.append("legend: " + ", ".join(marks))
    return "\n".join(lines) + "\n"


def _summary(topo: Topology) -> str:
    n_all, n_online = len(topo.all_cpus), len(topo.online)
    parts = [f"{n_all} CPUs"]
    if n_online != n_all:
        parts.append(f"{n_online} online")
    if topo.isolated:
        parts.append(f"{len(topo.isolated)} isolated ({topo.isolated})")
    extra = ""
    if topo.memory_only_nodes:
        extra = f" (+{len(topo.memory_only_nodes)} memory-only: {','.join(map(str, topo.memory_only_nodes))})"
    shape = (f"{_plural(len(topo.sockets), 'socket')}, {_plural(len(topo.numa_nodes), 'NUMA node')}{extra}, "
             f"{_plural(len(topo.core_cpus), 'core')}, {_plural(len(topo.l3_cpus), 'L3 group')}, "
             f"{topo.threads_per_core} thread{'s' if topo.threads_per_core > 1 else ''}/core")
    return ", ".join(parts) + "; " + shape


def _node_line(topo: Topology, node: int, cpus: CPUSet, show_l3: bool) -> str:
    text = f"NUMA node {node}: CPUs {cpus}"
    memory = topo.numa_memory_bytes.get(node)
    if memory is not None:
        text += f", {memory / 2**30:.1f} GiB"
    if len(topo.numa_nodes) > 1:
        text += ", distance " + " ".join(f"{m}:{topo.distance(node, m)}" for m in topo.numa_nodes)
    if show_l3:
        text += ", L3 " + ",".join(str(i) for i in sorted({topo.by_cpu[c].l3 for c in cpus}))
    return text


def _node_body(topo: Topology, cpus: CPUSet, indent: str, split_l3: bool,
               owners: Mapping[int, str] | None) -> list[str]:
    cores = sorted({topo.core_of[c] for c in cpus}, key=lambda k: topo.core_cpus[k].min())
    if not split_l3:
        return _core_lines(topo, cores, indent, owners)
    lines: list[str] = []
    for l3 in sorted({topo.by_cpu[c].l3 for c in cpus}):
        group = topo.l3_cpus[l3] & cpus
        lines.append(f"{indent}L3 {l3}: CPUs {group}")
        in_group = [k for k in cores if topo.core_cpus[k].min() in group]
        lines.extend(_core_lines(topo, in_group, indent + "  ", owners))
    return lines


def _core_lines(topo: Topology, cores: list[int], indent: str, owners: Mapping[int, str] | None) -> list[str]:
    rows = [(f"core {topo.by_cpu[topo.core_cpus[k].min()].core}",
             [_thread(topo, c, owners) for c in topo.core_cpus[k]]) for k in cores]
    label_w = max((len(label) for label, _ in rows), default=0)
    cell_w = max((len(cell) for _, cells in rows for cell in cells), default=0)
    return [f"{indent}{label:<{label_w}}  " + "  ".join(f"{cell:<{cell_w}}" for cell in cells).rstrip()
            for label, cells in rows]


def _thread(topo: Topology, cpu: int, owners: Mapping[int, str] | None) -> str:
    info = topo.by_cpu[cpu]
    text = str(cpu)
    if topo.kind_cpus and info.kind:
        text += f"[{info.kind}]"
    if not info.online:
        text += OFFLINE_MARK
    elif info.isolated:
        text += ISOLATED_MARK
    if owners is not None and info.online:
        text += "=" + owners.get(cpu, UNOWNED)
    return text


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
