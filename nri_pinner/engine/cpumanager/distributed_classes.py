"""distribute-cpus-across-numa on many equal NUMA nodes: the combination search by multiset.

A combination's balance floor (``distributed._combo_floor``) depends only on the multiset of its
nodes' free counts. When those multisets are few (an empty 16-node machine has two for any k:
with or without the node holding the reserved CPUs), their floors say at once which combinations
can still beat the best score so far, and the walk in the kubelet's order skips whole blocks of
combinations that cannot (C(15, 6) = 5,005 at once for 400 CPUs), keeping their positions: the
kubelet's loop scores them and keeps none, since only a strictly better score replaces the best.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

Classes = list[tuple[Counter[int], float]]  # (multiset of free counts, its floor), those that can hold N


def class_floors(numas: list[int], free: dict[int, int], k: int,
                 floor_of: Callable[[tuple[int, ...]], float | None]) -> Classes | None:
    """Every multiset of k nodes' free counts with its floor (``floor_of`` a representative), or
    None when there are more than 64 (counts mostly distinct: no cheaper than the combinations)."""
    groups: dict[int, list[int]] = {}
    for x in numas:
        groups.setdefault(free[x], []).append(x)
    members = list(groups.values())
    ways = [1] + [0] * k  # ways[j]: multisets of j counts, as the groups are added
    for group in members:
        ways = [sum(ways[j - t] for t in range(min(j, len(group)) + 1)) for j in range(k + 1)]
    if ways[k] > 64:
        return None
    room = [sum(len(g) for g in members[i:]) for i in range(len(members) + 1)]
    out: Classes = []

    def walk(i: int, left: int, combo: tuple[int, ...]) -> None:
        if left == 0:
            floor = floor_of(combo)
            if floor is not None:
                out.append((Counter(free[x] for x in combo), floor))
            return
        if room[i] >= left:
            for take in range(min(left, len(members[i])), -1, -1):
                walk(i + 1, left - take, combo + tuple(members[i][:take]))

    walk(0, k, ())
    return out


def active_combinations(numas: list[int], k: int, free: dict[int, int], classes: Classes | None,
                        distribution: int, bound: Callable[[], float]
                        ) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(indexes into ``numas``, combination) in itertools.combinations order, leaving out what the
    kubelet's loop scores without keeping: combinations with a node below ``distribution`` free CPUs
    (they fail its checks), and, with ``classes``, blocks in which no combination's multiset has a
    floor below ``bound()`` (read as the walk goes: the best so far). ``rank`` gives a position."""
    m = len(numas)
    if classes is None:
        eligible = [i for i in range(m) if free[numas[i]] >= distribution]
        for chosen_at in itertools.combinations(eligible, k):
            yield chosen_at, tuple(numas[i] for i in chosen_at)
        return
    values = [free[x] for x in numas]
    after = [Counter(values[i:]) for i in range(m + 1)]  # counts still available from index i

    def feasible(chosen: Counter[int], start: int) -> bool:
        limit = bound()
        for wanted, floor in classes:
            if floor >= limit:
                continue
            # the prefix fits in the multiset, and what the multiset still lacks lies ahead
            if all(c <= wanted[v] for v, c in chosen.items()) and all(
                    c - chosen[v] <= after[start][v] for v, c in wanted.items()):
                return True
        return False

    chosen: Counter[int] = Counter()
    at: list[int] = []

    def walk(start: int, slots: int) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
        if slots == 0:
            yield tuple(at), tuple(numas[i] for i in at)
            return
        for i in range(start, m - slots + 1):
            chosen[values[i]] += 1
            if feasible(chosen, i + 1):
                at.append(i)
                yield from walk(i + 1, slots - 1)
                at.pop()
            chosen[values[i]] -= 1

    yield from walk(0, k)


def rank(m: int, combo: Sequence[int]) -> int:
    """Position of ``combo`` (ascending indexes into m items) in itertools.combinations order."""
    k, position, prev = len(combo), 0, -1
    for j, c in enumerate(combo):
        for skipped in range(prev + 1, c):  # combinations with a smaller item at place j
            position += math.comb(m - skipped - 1, k - j - 1)
        prev = c
    return position


def unrank(m: int, k: int, position: int) -> list[int]:
    """The combination at ``position`` (inverse of ``rank``)."""
    combo: list[int] = []
    c = 0
    for j in range(k):
        while True:
            block = math.comb(m - c - 1, k - j - 1)
            if position < block:
                break
            position -= block
            c += 1
        combo.append(c)
        c += 1
    return combo
