"""distribute-cpus-across-numa when the nodes' free counts are mostly distinct: the kubelet's pick
among the k-combinations without a floor for each of the C(m, k) of them (C(16, 7) = 11,440).

The kubelet keeps the first combination, in its order, with the least score. Each combination's
score is at least its floor (``distributed._balance_floor``), and that floor is at least a sum over
its nodes (what taking the even share from each changes) plus one allowance for the leftover groups
that holds for every combination (handed to the fullest eligible nodes, see ``Bound.spread``). That
looser bound covers whole blocks of combinations sharing a prefix. Seeded with the score of the
combination whose nodes' sum is least (a near-best guess), a walk in the kubelet's order keeps the
combinations whose bound does not exceed it, and only those are scored by ascending floor: a
combination left out scores above a score that is reached, so it is never the kubelet's pick.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable

from .distributed_classes import rank
from .distributed_remainder import Bound

Scored = tuple[float, tuple[int, ...] | None, tuple[int, ...]]  # distributed._best_for_combo's answer
Found = tuple[int, float, tuple[int, ...] | None, tuple[tuple[int, ...], tuple[int, ...]]]


def least_first(numas: list[int], k: int, free: dict[int, int], distribution: int, n: int, group: int,
                floor_of: Callable[[tuple[int, ...]], float | None],
                score_of: Callable[[tuple[int, ...]], Scored | None]) -> Found | None:
    """(position, score, remainder nodes as the kubelet holds them, (combination, remainder nodes as
    scored)) of the kubelet's pick among the k-combinations of ``numas`` with at least
    ``distribution`` free CPUs on each node, or None when none can hold N."""
    eligible = [i for i in range(len(numas)) if free[numas[i]] >= distribution]
    if len(eligible) < k:
        return None
    bound = Bound([free[x] for x in numas], n, group)  # the mean of what is left once N are taken
    share = [bound.delta(free[numas[i]], distribution // group) for i in eligible]
    allowance = bound.spread([free[numas[i]] - distribution for i in eligible], (n - distribution * k) // group)
    # least[s][c]: the c smallest shares from eligible place s on
    least: list[list[int]] = [[0]]
    ordered: list[int] = []
    for s in range(len(share) - 1, -1, -1):
        bisect.insort(ordered, share[s])
        sums = [0]
        for v in ordered[:k]:
            sums.append(sums[-1] + v)
        least.append(sums)
    least.reverse()

    scored: dict[tuple[int, ...], Scored | None] = {}

    def exact(combo: tuple[int, ...]) -> Scored | None:
        if combo not in scored:
            scored[combo] = score_of(combo)
        return scored[combo]

    guess = tuple(sorted(sorted(range(len(share)), key=lambda t: (share[t], t))[:k]))
    combo = tuple(numas[eligible[t]] for t in guess)
    found = exact(combo) if floor_of(combo) is not None else None
    cut = bound.cut(math.inf if found is None else found[0], False)  # changes that score above the guess
    kept: list[tuple[int, ...]] = []

    def walk(start: int, slots: int, change: int, chosen: tuple[int, ...]) -> None:
        if slots == 0:
            kept.append(chosen)
            return
        for t in range(start, len(share) - slots + 1):
            if change + share[t] + least[t + 1][slots - 1] + allowance < cut:
                walk(t + 1, slots - 1, change + share[t], (*chosen, t))

    walk(0, k, 0, ())
    ranked = []
    for chosen in kept:  # eligible places ascending: tuples compare in the kubelet's order
        combo = tuple(numas[eligible[t]] for t in chosen)
        floor = floor_of(combo)
        if floor is not None:
            ranked.append((floor, chosen, combo))
    ranked.sort()
    best: tuple[float, tuple[int, ...], tuple[int, ...], tuple[int, ...] | None, tuple[int, ...]] | None = None
    for floor, chosen, combo in ranked:
        if best is not None and (floor > best[0] or (floor == best[0] and chosen > best[1])):
            if floor > best[0]:
                break  # nothing left can reach the least score
            continue  # can only tie, and comes later
        result = exact(combo)
        if result is not None and (best is None or result[0] < best[0] or (result[0] == best[0] and chosen < best[1])):
            best = (result[0], chosen, combo, result[1], result[2])
    if best is None or best[0] == math.inf:
        return None
    score, chosen, combo, rest_view, rest = best
    return rank(len(numas), [eligible[t] for t in chosen]), score, rest_view, (combo, rest)
