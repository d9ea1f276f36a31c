"""A deliberately naive takeByTopology: the kubelet's cpu_assignment.go (v1.32), step by step;
``odd_smt=True`` swaps in the takePartialUncore of 1.34+ (kubernetes#131850).

Works on plain dicts (cpu -> (core, socket, numa, uncore)) with Python sets and recomputes
every count from scratch on each comparison, as the kubelet's CPUDetails does. It is the
oracle the bitmask allocator is checked against, so it shares no code with it. The core id
is the kubelet's CoreID; ``details_of`` derives it from our model as (socket, core) order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from nri_pinner.engine.topology.model import Topology

Details = dict[int, tuple[int, int, int, int]]  # cpu -> (core, socket, numa, uncore)
CORE, SOCKET, NUMA, UNCORE = 0, 1, 2, 3


def details_of(topology: Topology) -> Details:
    return {
        c.cpu: (topology.core_of[c.cpu], c.socket, c.numa, c.l3) for c in topology.cpus if c.online
    }


def _ids(d: Details, level: int) -> set[int]:
    return {v[level] for v in d.values()}


def _cpus(d: Details, level: int, *ids: int) -> set[int]:
    return {c for c, v in d.items() if v[level] in ids}


def _children(d: Details, parent: int, pid: int, child: int) -> list[int]:
    return list({v[child] for v in d.values() if v[parent] == pid})


class _Acc:
    def __init__(self, topo: Details, available: set[int], n: int, spread: bool, odd_smt: bool = False) -> None:
        self.topo = topo
        self.odd_smt = odd_smt  # takePartialUncore of kubelet 1.34+ (kubernetes#131850)
        self.d: Details = {c: v for c, v in topo.items() if c in available}
        self.needed = n
        self.result: set[int] = set()
        self.spread = spread
        self.numa_first = len(_ids(topo, SOCKET)) >= len(_ids(topo, NUMA))
        n_cpus = len(topo)
        self.per_core = n_cpus // len(_ids(topo, CORE))
        self.per_socket = n_cpus // len(_ids(topo, SOCKET))
        self.per_uncore = n_cpus // len(_ids(topo, UNCORE))

    def sort(self, ids: list[int], level: int) -> list[int]:
        return sorted(ids, key=lambda i: (len(_cpus(self.d, level, i)), i))

    def numas(self) -> list[int]:
        if self.numa_first:
            return self.sort(list(_ids(self.d, NUMA)), NUMA)
        return [x for s in self.sockets() for x in self.sort(_children(self.d, SOCKET, s, NUMA), NUMA)]

    def sockets(self) -> list[int]:
        if self.numa_first:
            return [x for n in self.numas() for x in self.sort(_children(self.d, NUMA, n, SOCKET), SOCKET)]
        return self.sort(list(_ids(self.d, SOCKET)), SOCKET)

    def cores(self) -> list[int]:
        if self.numa_first:
            return [x for s in self.sockets() for x in self.sort(_children(self.d, SOCKET, s, CORE), CORE)]
        return [x for n in self.numas() for x in self.sort(_children(self.d, NUMA, n, CORE), CORE)]

    def uncores(self) -> list[int]:
        return [x for n in self.numas() for x in self.sort(_children(self.d, NUMA, n, UNCORE), UNCORE)]

    def cpus_sorted(self) -> list[int]:
        if self.spread:
            return [c for s in self.sockets() for c in sorted(_cpus(self.d, SOCKET, s))]
        return [c for k in self.cores() for c in sorted(_cpus(self.d, CORE, k))]

    def take(self, cpus: set[int]) -> None:
        self.result |= cpus
        self.d = {c: v for c, v in self.d.items() if c not in self.result}
        self.needed -= len(cpus)

    def _take_full(self, order: list[int], level: int, is_free: Callable[[int], bool]) -> None:
        for i in [i for i in order if is_free(i)]:
            cpus = _cpus(self.topo, level, i)
            if self.needed >= len(cpus):
                self.take(cpus)

    def full_numas(self) -> None:
        self._take_full(self.numas(), NUMA,
                        lambda i: len(_cpus(self.d, NUMA, i)) == len(_cpus(self.topo, NUMA, i)))

    def full_sockets(self) -> None:
        self._take_full(self.sockets(), SOCKET, lambda i: len(_cpus(self.d, SOCKET, i)) == self.per_socket)

    def full_cores(self) -> None:
        self._take_full(self.cores(), CORE, lambda i: len(_cpus(self.d, CORE, i)) == self.per_core)

    def full_uncores(self) -> None:
        self._take_full(self.uncores(), UNCORE,
                        lambda i: len(_cpus(self.d, UNCORE, i)) == len(_cpus(self.topo, UNCORE, i)))

    def uncore_step(self) -> None:
        for u in self.uncores():
            if self.needed >= self.per_uncore:
                self.full_uncores()
            if self.needed < 1:
                return
            cores = sorted({v[CORE] for v in self.d.values() if v[UNCORE] == u})
            if self.odd_smt:  # numCoresNeeded := (needed + CPUsPerCore() - 1) / CPUsPerCore()
                cores = cores[: (self.needed + self.per_core - 1) // self.per_core]
            else:
                cores = cores[: self.needed // self.per_core]
            cpus = _cpus(self.d, CORE, *cores)
            if self.odd_smt and self.needed % 2 != 0 and self.per_core > 1:
                ordered = sorted(cpus)  # drop the last CPU when one is over
                if len(ordered) > self.needed:
                    ordered = ordered[: len(cpus) - 1]
                cpus = set(ordered)
            if len(cpus) == self.needed:
                self.take(cpus)
            if self.needed < 1:
                return


def naive_packed(topo: Details, available: set[int], n: int, *, spread: bool = False,
                 uncore: bool = False, odd_smt: bool = False) -> set[int]:
    acc = _Acc(topo, available, n, spread, odd_smt)
    if acc.needed < 1:
        return set()
    if acc.needed > len(acc.d):
        raise ValueError("not enough cpus")
    steps: list[Callable[[], None]] = (
        [acc.full_numas, acc.full_sockets] if acc.numa_first else [acc.full_sockets, acc.full_numas]
    )
    if uncore:
        steps.append(acc.uncore_step)
    if not spread:
        steps.append(acc.full_cores)
    for step in steps:
        step()
        if acc.needed < 1:
            return acc.result
    for cpu in acc.cpus_sorted():
        acc.take({cpu})
        if acc.needed < 1:
            return acc.result
    raise ValueError("failed to allocate cpus")


def _round3(x: float) -> float:
    return math.floor(x * 1000 + 0.5) / 1000


def _stddev(xs: list[int]) -> float:
    m = _round3(sum(xs) / len(xs))
    return _round3(math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs)))


class _Slice:
    """Go slice header (array, len, cap); combos handed out alias like iterateCombinations'."""

    def __init__(self, array: list[int], length: int, cap: int) -> None:
        self.array, self.length, self.cap = array, length, cap

    def get(self) -> list[int]:
        return self.array[: self.length]


def _go_append(s: _Slice, x: int) -> _Slice:
    if s.length == s.cap:
        cap = 1 if s.cap == 0 else 2 * s.cap  # runtime.growslice below 256 elements
        array = s.array[: s.length] + [0] * (cap - s.length)
        s = _Slice(array, s.length, cap)
    s.array[s.length] = x
    return _Slice(s.array, s.length + 1, s.cap)


def _subsets(items: list[int], k: int) -> Iterator[_Slice]:
    def helper(k: int, start: int, accum: _Slice) -> Iterator[_Slice]:
        if k == 0:
            yield accum
            return
        for i in range(start, len(items) - k + 1):
            yield from helper(k - 1, i + 1, _go_append(accum, items[i]))

    if k >= 1:
        yield from helper(k, 0, _Slice([], 0, 0))


def naive_distributed(topo: Details, available: set[int], n: int, group: int, *,
                      spread: bool = False) -> set[int]:
    if n % group:
        return naive_packed(topo, available, n, spread=spread)
    acc = _Acc(topo, available, n, spread)
    if acc.needed < 1:
        return set()
    if acc.needed > len(acc.d):
        raise ValueError("not enough cpus")
    numas = acc.numas()
    free = {x: len(_cpus(acc.d, NUMA, x)) for x in numas}
    groups_per_numa = ((len(topo) - 1) // group + 1 - 1) // len(_ids(topo, NUMA)) + 1
    needed_groups = (n - 1) // group + 1
    for k in range((needed_groups - 1) // groups_per_numa + 1, min(needed_groups, len(numas)) + 1):
        best: float = math.inf
        best_combo: _Slice | None = None
        best_rem: _Slice | None = None
        for combo_slice in _subsets(numas, k):
            if best == 0:
                break
            combo = combo_slice.get()
            if sum(free[x] for x in combo) < n or sum(free[x] // group for x in combo) * group < n:
                continue
            dist = n // k // group * group
            if any(free[x] < dist for x in combo):
                continue
            after = dict(free)
            for x in combo:
                after[x] -= dist
            rem = n - dist * k
            local: float = _stddev(list(after.values())) if rem == 0 else math.inf
            local_rem: _Slice | None = None
            cands = [x for x in combo if after[x] >= group]
            for kk in range(len(cands), 0, -1):
                if rem == 0:
                    break
                for sub_slice in _subsets(cands, kk):
                    sub = sub_slice.get()
                    if sum(after[x] for x in sub) < rem:
                        continue
                    trial, r = dict(after), rem
                    while r > 0:  # the kubelet's loop; a stuck subset would hang it
                        moved = False
                        for x in sub:
                            if r and trial[x] >= group:
                                trial[x] -= group
                                r -= group
                                moved = True
                        if not moved:
                            raise RuntimeError("kubelet would loop forever")
                    score = _stddev(list(trial.values()))
                    if score < local:
                        local, local_rem = score, sub_slice
            if local < best:
                best, best_combo, best_rem = local, combo_slice, local_rem
        if best_combo is None:
            continue
        # read the aliased slices only now, as the kubelet does
        dist = n // k // group * group
        for x in best_combo.get():
            if len(_cpus(acc.d, NUMA, x)) < dist:
                raise RuntimeError("kubelet: accounting error")
            acc.take(naive_packed(topo, _cpus(acc.d, NUMA, x), dist, spread=spread))
        rem = n - dist * k
        while rem > 0:
            moved = False
            for x in best_rem.get() if best_rem else []:
                if rem and len(_cpus(acc.d, NUMA, x)) >= group:
                    acc.take(naive_packed(topo, _cpus(acc.d, NUMA, x), group, spread=spread))
                    rem -= group
                    moved = True
            if not moved:
                raise RuntimeError("kubelet would loop forever")
        return acc.result
    return naive_packed(topo, available, n, spread=spread)
