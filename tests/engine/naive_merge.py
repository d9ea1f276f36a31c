"""A deliberately naive Topology Manager: the kubelet's algorithm, step by step, no shortcuts.

CPU hints walk every NUMA mask (``bitmask.IterateBitMasks`` order) and count
CPUs one by one; the merge walks the full cross product of all providers'
hints and folds them with a line-by-line reading of ``HintMerger.compare``.
It is the oracle the fast engine is checked against, so it shares no code
with it (hints are plain ``(mask | None, preferred)`` tuples here).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

from nri_pinner.engine.cpuset import CPUSet
from nri_pinner.engine.topology.model import Topology

Hint = tuple[int | None, bool]
ProviderHints = Mapping[str, Sequence[Hint] | None] | None


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def naive_cpu_hints(topology: Topology, available: CPUSet, reusable: CPUSet, request: int, *,
                    full_pcpus_only: bool = False, align_by_socket: bool = False) -> list[Hint]:
    online = [c for c in topology.cpus if c.online]
    numa_of = {c.cpu: c.numa for c in topology.cpus}
    nodes = sorted({c.numa for c in online})
    free = list(available)
    if full_pcpus_only:
        usable = set(available) | set(reusable)
        free = [cpu for cpu in available
                if all(s in usable for s in topology.siblings(cpu) if topology.by_cpu[s].online)]
    min_affinity = len(nodes)
    hint_masks: list[int] = []
    for size in range(1, len(nodes) + 1):
        for combo in itertools.combinations(nodes, size):
            in_mask = set(combo)
            cpus_in_mask = sum(1 for c in online if c.numa in in_mask)
            if cpus_in_mask >= request and size < min_affinity:
                min_affinity = size
            matching = 0
            ok = True
            for cpu in reusable:
                if numa_of[cpu] not in in_mask:
                    ok = False
                    break
                matching += 1
            if not ok:
                continue
            matching += sum(1 for cpu in free if numa_of[cpu] in in_mask)
            if matching < request:
                continue
            hint_masks.append(sum(1 << n for n in combo))
    per_socket = len(nodes) // len({c.socket for c in online})
    hints: list[Hint] = []
    for mask in hint_masks:
        preferred = False
        if align_by_socket and per_socket > 0:
            min_sockets = (min_affinity + per_socket - 1) // per_socket
            sockets = {c.socket for c in online if mask >> c.numa & 1}
            preferred = len(sockets) == min_sockets
        if bin(mask).count("1") == min_affinity:
            preferred = True
        hints.append((mask, preferred))
    return hints


def _filter(providers_hints: Sequence[ProviderHints]) -> list[list[Hint]]:
    out: list[list[Hint]] = []
    for hints in providers_hints:
        if not hints:
            out.append([(None, True)])
            continue
        for resource_hints in hints.values():
            if resource_hints is None:
                out.append([(None, True)])
            elif len(resource_hints) == 0:
                out.append([(None, False)])
            else:
                out.append(list(resource_hints))
    return out


def naive_merge(policy: str, numa_nodes: Sequence[int], providers_hints: Sequence[ProviderHints], *,
                prefer_closest: bool = False,
                distance: Callable[[int, int], int] = lambda a, b: 10 if a == b else 20) -> tuple[Hint, bool]:
    """Return ``((mask | None, preferred), admit)`` exactly as the kubelet would."""
    if policy == "none":
        return (None, False), True
    default = sum(1 << n for n in numa_nodes)
    filtered = _filter(providers_hints)
    if policy == "single-numa-node":
        filtered = [[h for h in hs if h[1] and (h[0] is None or bin(h[0]).count("1") == 1)]
                    for hs in filtered]

    best_non_preferred = 0
    for hs in filtered:
        narrowest: int | None = None
        for mask, _ in hs:
            if mask is None:
                continue
            if narrowest is None or _narrower(mask, narrowest):
                narrowest = mask
        if narrowest is not None and bin(narrowest).count("1") > best_non_preferred:
            best_non_preferred = bin(narrowest).count("1")

    def avg(mask: int) -> float:
        total, n = 0.0, 0.0
        for a in _bits(mask):
            for b in _bits(mask):
                total += float(distance(a, b))
                n += 1
        return total / n

    def compare_masks(current: Hint, candidate: Hint) -> Hint:
        cur, cand = current[0], candidate[0]
        assert cur is not None and cand is not None
        if cur == cand:
            return current
        if policy != "single-numa-node" and prefer_closest:
            if bin(cur).count("1") != bin(cand).count("1"):
                best = cur if _narrower(cur, cand) else cand
            else:
                dc, dd = avg(cur), avg(cand)
                best = (cur if cur < cand else cand) if dc == dd else (cur if dc < dd else cand)
        else:
            best = cur if _narrower(cur, cand) else cand
        return current if best == cur else candidate

    def compare(current: Hint | None, candidate: Hint) -> Hint | None:
        cand_count = bin(candidate[0] or 0).count("1")
        if cand_count == 0:
            return current
        if current is None:
            return candidate
        if not current[1] and candidate[1]:
            return candidate
        if current[1] and not candidate[1]:
            return current
        if current[1] and candidate[1]:
            return compare_masks(current, candidate)
        cur_count = bin(current[0] or 0).count("1")
        b = best_non_preferred
        if cur_count > b:
            return compare_masks(current, candidate)
        if cur_count == b:
            return current if cand_count != b else compare_masks(current, candidate)
        if cand_count > b:
            return current
        if cand_count == b:
            return candidate
        if cand_count > cur_count:
            return candidate
        if cand_count < cur_count:
            return current
        return compare_masks(current, candidate)

    best: Hint | None = None
    for permutation in itertools.product(*filtered):
        preferred = True
        affinities: list[int] = []
        for mask, pref in permutation:
            if mask is not None:
                affinities.append(mask)
                if mask != affinities[0]:
                    preferred = False
            if not pref:
                preferred = False
        merged = default
        for mask in affinities:
            merged &= mask
        best = compare(best, (merged, preferred))
    if best is None:
        best = (default, False)
    if policy == "single-numa-node" and best[0] == default:
        best = (None, best[1])
    admit = policy == "best-effort" or best[1]
    return best, admit


def _narrower(a: int, b: int) -> bool:
    ca, cb = bin(a).count("1"), bin(b).count("1")
    if ca == cb:
        return a < b
    return ca < cb
