"""Subsets of NUMA nodes whose weights reach a need, walked in the orders the merge and the kubelet use
(branch and bound on the heaviest completion; shared by CPU, device and memory hint lists)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def _subsets_ascending(nodes: list[int], weights: list[int], size: int, need: int) -> Iterator[int]:
    """``size``-subsets of ``nodes`` with total weight >= ``need``, in ascending mask order.

    Choosing the highest node first (lowest candidates first) yields ascending
    masks; a branch is cut when even its heaviest completion falls short.
    """
    heaviest = _heaviest_table(weights)

    def pick(limit: int, slots: int, short: int, acc: int) -> Iterator[int]:
        if slots == 0:
            if short <= 0:
                yield acc
            return
        for i in range(slots - 1, limit):
            if weights[i] + heaviest[i][slots - 1] < short:
                continue
            yield from pick(i, slots - 1, short - weights[i], acc | (1 << nodes[i]))

    yield from pick(len(nodes), size, need, 0)


def _combinations_reaching(nodes: Sequence[int], weights: list[int], required: int, size: int,
                           need: int) -> Iterator[int]:
    """``size``-combinations of ``nodes`` holding every ``required`` node with total weight >=
    ``need``, as masks in ``itertools.combinations`` order (the kubelet's IterateBitMasks order);
    a branch is cut when it skipped a required node or its heaviest completion falls short."""
    count = len(nodes)
    # best[i][r]: the r largest weights among nodes[i:], summed
    best = [[0] * (size + 1) for _ in range(count + 1)]
    for i in range(count - 1, -1, -1):
        ordered = sorted(weights[i:], reverse=True)
        row = best[i]
        for r in range(1, size + 1):
            row[r] = row[r - 1] + ordered[r - 1] if r <= len(ordered) else row[r - 1]
    is_required = [bool(required >> n & 1) for n in nodes]
    required_after = [0] * (count + 1)  # required nodes among nodes[i:]
    for i in range(count - 1, -1, -1):
        required_after[i] = required_after[i + 1] + is_required[i]

    def pick(start: int, slots: int, short: int, acc: int) -> Iterator[int]:
        if slots == 0:
            if short <= 0 and required_after[start] == 0:
                yield acc
            return
        if required_after[start] > slots:
            return
        for i in range(start, count - slots + 1):
            if weights[i] + best[i + 1][slots - 1] >= short:
                yield from pick(i + 1, slots - 1, short - weights[i], acc | (1 << nodes[i]))
            if is_required[i]:  # every later combination would leave this required node out
                return

    yield from pick(0, size, need, 0)


def _heaviest_table(weights: list[int]) -> list[list[int]]:
    """``table[i][r]``: the ``r`` largest of ``weights[:i]``, summed (a branch-and-bound ceiling)."""
    table: list[list[int]] = []
    for i in range(len(weights) + 1):
        sums = [0]
        for w in sorted(weights[:i], reverse=True):
            sums.append(sums[-1] + w)
        table.append(sums)
    return table
