"""distribute-cpus-across-numa: which nodes of the chosen combination take the leftover groups.

The kubelet tries every subset of the combination's nodes that still have a group free (largest
subsets first, each size in combinations order), hands the R leftover groups out round-robin over
the subset, and keeps the first subset with the least balance score. That is up to 2^k subsets
per combination; the same subset is found here with far fewer scored:

* A subset of at least R members ends with one group taken from each of its first R members
  (every candidate has a group free, so the first round ends the handing out). All subsets
  sharing those R members score alike, so each R-prefix is scored once, where the kubelet's
  order first reaches it: in the largest subset it heads, i.e. followed by every later candidate
  (C(k, R) scores instead of the sum of C(k, j) for j >= R).
* Only smaller subsets need several rounds; they are handed out as the kubelet does.
* The search stops once the best score equals the combination's floor (``distributed``'s
  ``_balance_floor``): the kubelet only replaces the best with a strictly better score.

Scores are computed on the whole free-count vector in the kubelet's order (``stddev``) and cached
by that vector, so they are the very floats the straightforward port compares.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator

from .distributed_classes import rank

Remainder = tuple[float, tuple[int, int], tuple[int, ...]]  # (score, (size, position), subset)


def go_round3(x: float) -> float:
    # Go's math.Round (half away from zero); the inputs here are never negative.
    return math.floor(x * 1000 + 0.5) / 1000


def stddev(values: list[int]) -> float:
    mean = go_round3(sum(values) / len(values))
    var = sum((v - mean) * (v - mean) for v in values) / len(values)
    return go_round3(math.sqrt(var))


class Bound:
    """Lower bounds on the scores of ways to hand the groups out, in exact integers: the kubelet's
    mean is rounded to 3 decimals, so each squared deviation times 10^6 is an integer. ``score``
    turns such a sum into a score no float ``stddev`` of a vector with that sum falls below: each
    of its squares is off by a relative 2.3e-16 x 1000 x mean at most (a nonzero deviation is at
    least 0.001), far inside the 1e-6 margin, and sqrt and rounding are monotone."""

    __slots__ = ("_cuts", "base", "group", "mean", "n")

    def __init__(self, values: list[int], remainder: int, group: int) -> None:
        self.n, self.group = len(values), group
        self.mean = math.floor((sum(values) - remainder) / len(values) * 1000 + 0.5)  # go_round3's, x 1000
        self.base = sum(self.dev2(v) for v in values)
        self._cuts: dict[tuple[float, bool], float] = {}

    def dev2(self, v: int) -> int:
        return (1000 * v - self.mean) ** 2

    def delta(self, free: int, groups: int) -> int:
        """How the sum changes when ``groups`` groups are taken from a node with ``free`` CPUs."""
        return self.dev2(free - groups * self.group) - self.dev2(free)

    def score(self, change: int) -> float:
        return go_round3(math.sqrt(max(0, self.base + change) / 1e6 * (1 - 1e-6) / self.n))

    def cut(self, limit: float, ties: bool) -> float:
        """The least change whose score exceeds ``limit`` (or reaches it, with ``ties``): a bound
        at or above it rules a block out with one integer comparison. inf for an infinite limit."""
        if limit == math.inf:
            return math.inf
        key = (limit, ties)
        found = self._cuts.get(key)
        if found is None:
            def out(change: int) -> bool:
                return self.score(change) >= limit if ties else self.score(change) > limit

            if out(-self.base):  # every sum of squares does
                found = -self.base
            else:  # from where rounding turns over, then exactly: the score only rises with the change
                edge = max(0.0, limit - 0.0005 if ties else limit + 0.0005)
                guess = math.ceil(edge * edge * self.n * 1e6 / (1 - 1e-6)) - self.base
                lo, hi = max(guess - 2, -self.base), guess + 2
                while out(lo):
                    lo = max(lo - 2 * (hi - lo), -self.base)
                while not out(hi):
                    hi += 2 * (hi - lo)
                while hi - lo > 1:  # out(hi), not out(lo)
                    mid = (lo + hi) // 2
                    lo, hi = (lo, mid) if out(mid) else (mid, hi)
                found = hi
            self._cuts[key] = found
        return found

    def spread(self, frees: list[int], groups: int) -> int:
        """The least change from handing ``groups`` groups out over nodes with ``frees`` CPUs, in any
        amounts (each group from the node with the most left: the sum is separable and convex)."""
        left = [-f for f in frees]
        heapq.heapify(left)
        change = 0
        for _ in range(groups):
            most = -left[0]
            change += self.delta(most, 1)
            heapq.heapreplace(left, left[0] + self.group)
        return change


def best_remainder(candidates: list[int], after: dict[int, int], numas: list[int], remainder: int,
                   group: int, floor: float) -> Remainder:
    """The kubelet's pick among the remainder subsets of ``candidates`` (nodes with a group left in
    ``after``): its score, its (size, position) in the kubelet's order and the subset; score inf
    and an empty subset when none can take ``remainder``. ``floor``: no subset scores below it."""
    m, groups = len(candidates), remainder // group
    base = [after[x] for x in numas]
    where = [numas.index(x) for x in candidates]  # each candidate's place in the score vector
    frees = [after[x] for x in candidates]
    bound = Bound(base, remainder, group)
    one = [bound.delta(f, 1) for f in frees]  # each candidate's change for one group taken
    scores: dict[tuple[int, ...], float] = {}
    best: Remainder = (math.inf, (0, 0), ())

    def score(values: list[int]) -> float:
        key = tuple(values)
        found = scores.get(key)
        if found is None:
            found = scores[key] = stddev(values)
        return found

    def least(lo: int, hi: int, count: int) -> int:
        return sum(sorted(one[lo:hi])[:count])

    def heads(last: int, start: int, count: int, change: int, prefix: tuple[int, ...]
              ) -> Iterator[tuple[int, ...]]:
        """``count`` more of range(start, last) after ``prefix``, in combinations order, leaving out
        the blocks whose least change (their fittest completion) cannot beat the best score."""
        if count == 0:
            yield prefix
            return
        for i in range(start, last - count + 1):
            if change + one[i] + least(i + 1, last, count - 1) < bound.cut(best[0], True):
                yield from heads(last, i + 1, count - 1, change + one[i], (*prefix, i))

    # Sizes m down to R: the R-prefixes ending at candidate `last` first appear at size m - last - 1 + R.
    for last in range(groups - 1, m):
        tail = tuple(range(last + 1, m))
        for head in heads(last, 0, groups - 1, one[last], ()):
            values = base.copy()
            for i in head:
                values[where[i]] -= group
            values[where[last]] -= group
            balance = score(values)
            if balance < best[0]:
                chosen = (*head, last, *tail)
                best = (balance, (len(chosen), rank(m, chosen)), tuple(candidates[i] for i in chosen))
                if balance <= floor:
                    return best
    # Sizes below R: several rounds, handed out as the kubelet does. A block is skipped when its
    # bound cannot beat the best so far, or exceeds a score that some subset reaches (a guess: the
    # k fullest candidates, for each size k), since the least score is then elsewhere.
    sizes = range(min(m, groups - 1), 0, -1)
    fullest = [sorted(frees[s:], reverse=True) for s in range(m + 1)] if sizes else []  # from candidate s on
    by_free = sorted(range(m), key=lambda i: -frees[i])
    guess = math.inf
    for k in sizes:
        values = base.copy()
        if _spread(values, [where[i] for i in sorted(by_free[:k])], remainder, group):
            guess = min(guess, score(values))

    def hopeless(change: int) -> bool:  # a block whose least change is ``change``
        return change >= bound.cut(best[0], True) or change >= bound.cut(guess, False)

    for k in sizes:
        if hopeless(bound.spread(fullest[0][:k], groups)):
            break  # even the k fullest taking the groups in any amounts: true of every smaller size too
        for chosen in _Rounds(bound, frees, fullest, groups, k).subsets(hopeless):
            values = base.copy()
            if not _spread(values, [where[i] for i in chosen], remainder, group):
                continue
            balance = score(values)
            if balance < best[0]:
                best = (balance, (k, rank(m, chosen)), tuple(candidates[i] for i in chosen))
                if balance <= floor:
                    return best
    return best


class _Rounds:
    """The k-subsets (k < R) of the candidates in combinations order, less the blocks sharing a
    prefix whose every subset provably scores no better than the best so far.

    Round-robin gives each member q = R // k groups and the first R % k members one more, unless
    a member runs out; when no node the block can use can run out, that is the exact change for
    the prefix, and the rest is bounded by the fullest remaining nodes taking the rest of the
    amounts, fullest with most (any other choice changes the sum by no less). Otherwise the first
    round still takes a group from every member, and the others can go anywhere among them."""

    def __init__(self, bound: Bound, frees: list[int], fullest: list[list[int]], groups: int, k: int) -> None:
        self.bound, self.frees, self.fullest, self.groups, self.k = bound, frees, fullest, groups, k
        m, group = len(frees), bound.group
        q, r = divmod(groups, k)
        self.amounts = [q + 1] * r + [q] * (k - r)  # by place in the subset
        roomy = [groups] * (m + 1)  # least groups any candidate from s on can give
        for s in range(m - 1, -1, -1):
            roomy[s] = min(roomy[s + 1], frees[s] // group)
        self.roomy = roomy
        self.tails: dict[tuple[int, int], int] = {}
        self.checks = self.saved = 0

    def _tail(self, start: int, placed: int) -> int:
        """The least change from the fullest nodes from ``start`` on taking the amounts after ``placed``."""
        key = (start, placed)
        if key not in self.tails:
            delta, amounts = self.bound.delta, self.amounts
            self.tails[key] = sum(delta(f, amounts[placed + u])
                                  for u, f in enumerate(self.fullest[start][: self.k - placed]))
        return self.tails[key]

    def _least(self, prefix: tuple[int, ...], exact: int | None, start: int) -> int:
        bound, frees, k = self.bound, self.frees, self.k
        if exact is not None and self.roomy[start] >= self.amounts[0]:
            return exact + self._tail(start, len(prefix))
        members = [frees[i] for i in prefix] + self.fullest[start][: k - len(prefix)]
        return (sum(bound.delta(f, 1) for f in members)
                + bound.spread([f - bound.group for f in members], self.groups - k))

    def subsets(self, hopeless: Callable[[int], bool]) -> Iterator[tuple[int, ...]]:
        """The subsets, less the blocks whose least change ``hopeless`` rules out (asked late: the
        best so far keeps falling)."""
        m, frees, group, amounts = len(self.frees), self.frees, self.bound.group, self.amounts

        def walk(start: int, prefix: tuple[int, ...], exact: int | None) -> Iterator[tuple[int, ...]]:
            # exact: the prefix's change when no member runs out, None when one can
            count = self.k - len(prefix)
            if count == 0:
                yield prefix
                return
            for i in range(start, m - count + 1):
                if count == 1:  # a bound per subset would cost about what scoring it does
                    yield (*prefix, i)
                    continue
                now = None
                if exact is not None and frees[i] // group >= amounts[0]:
                    now = exact + self.bound.delta(frees[i], amounts[len(prefix)])
                # a bound costs about what scoring a subset does: keep asking while they save more
                if self.checks < 32 or self.saved >= 2 * self.checks:
                    self.checks += 1
                    if hopeless(self._least((*prefix, i), now, i + 1)):
                        self.saved += math.comb(m - i - 1, count - 1)  # the subsets left out
                        continue
                yield from walk(i + 1, (*prefix, i), now)

        if not hopeless(self._least((), 0, 0)):
            yield from walk(0, (), 0)


def _spread(values: list[int], places: list[int], remainder: int, group: int) -> bool:
    """Hand out ``remainder`` CPUs in groups round-robin over ``places``; False if it cannot finish
    (the kubelet would loop forever there: the subset is treated as unusable)."""
    while remainder > 0:
        progressed = False
        for p in places:
            if remainder == 0:
                break
            if values[p] < group:
                continue
            values[p] -= group
            remainder -= group
            progressed = True
        if not progressed:
            return False
    return True
