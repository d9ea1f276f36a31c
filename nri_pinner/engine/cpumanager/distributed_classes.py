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
from collections.abc import Callable, Iterator, Sequence

Classes = list[tuple[tuple[int, ...], float]]
"""Each multiset of k nodes' free counts that can hold N, with its floor; a multiset is how many
nodes of each distinct free count it takes, in the order of ``_counts``."""


def _counts(numas: list[int], free: dict[int, int]) -> dict[int, list[int]]:
    """The nodes by free count, counts in order of first appearance in ``numas``."""
    groups: dict[int, list[int]] = {}
    for x in numas:
        groups.setdefault(free[x], []).append(x)
    return groups


def class_floors(numas: list[int], free: dict[int, int], k: int,
                 floor_of: Callable[[tuple[int, ...]], float | None]) -> Classes | None:
    """Every multiset of k nodes' free counts with its floor (``floor_of`` a representative), or
    None when there are more than 64 (counts mostly distinct: no cheaper than the combinations)."""
    members = list(_counts(numas, free).values())
    ways = [1] + [0] * k  # ways[j]: multisets of j counts, as the groups are added
    for group in members:
        ways = [sum(ways[j - t] for t in range(min(j, len(group)) + 1)) for j in range(k + 1)]
    if ways[k] > 64:
        return None
    room = [sum(len(g) for g in members[i:]) for i in range(len(members) + 1)]
    out: Classes = []
    taken = [0] * len(members)

    def walk(i: int, left: int, combo: tuple[int, ...]) -> None:
        if left == 0:
            floor = floor_of(combo)
            if floor is not None:
                out.append((tuple(taken), floor))
            return
        if room[i] >= left:
            for take in range(min(left, len(members[i])), -1, -1):
                taken[i] = take
                walk(i + 1, left - take, combo + tuple(members[i][:take]))
            taken[i] = 0

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
    slot = {v: j for j, v in enumerate(_counts(numas, free))}  # free count -> place in a multiset
    kinds = [slot[free[x]] for x in numas]
    ahead = [[0] * len(slot) for _ in range(m + 1)]  # ahead[i]: nodes of each count from index i on
    for i in range(m - 1, -1, -1):
        ahead[i][:] = ahead[i + 1]
        ahead[i][kinds[i]] += 1
    chosen = [0] * len(slot)
    at: list[int] = []

    def feasible(start: int) -> bool:
        limit, left = bound(), ahead[start]
        for wanted, floor in classes:
            # the prefix fits in the multiset, and what the multiset still lacks lies ahead
            if floor < limit and all(c <= w <= c + a for c, w, a in zip(chosen, wanted, left, strict=True)):
                return True
        return False

    def walk(start: int, slots: int) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
        if slots == 0:
            yield tuple(at), tuple(numas[i] for i in at)
            return
        # a count that failed here fails again further on: the same prefix, fewer nodes ahead,
        # and the bound only falls
        failed: set[int] = set()
        for i in range(start, m - slots + 1):
            kind = kinds[i]
            if kind in failed:
                continue
            chosen[kind] += 1
            if feasible(i + 1):
                at.append(i)
                yield from walk(i + 1, slots - 1)
                at.pop()
            else:
                failed.add(kind)
            chosen[kind] -= 1

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
