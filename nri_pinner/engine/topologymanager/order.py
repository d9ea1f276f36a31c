"""The Topology Manager's hint ranking (the kubelet's ``HintMerger.compare``) as sort keys."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import chain

from .hints import nodes_of

Distance = Callable[[int, int], int]


class _Order:
    """The kubelet's hint comparison as sort keys (smaller key = better hint)."""

    def __init__(self, distance: Distance, nodes: Sequence[int], *, closest: bool) -> None:
        self.closest = closest
        self._distance = distance
        # N² distance calls: built once per Topology Manager (merge.py keeps the order in its memo)
        self.table: dict[int, dict[int, int]] = (
            {a: {b: distance(a, b) for b in nodes} for a in nodes} if closest else {})

    def mean_distance(self, mask: int) -> float:
        nodes = nodes_of(mask)
        total = sum(self._distance(a, b) for a in nodes for b in nodes)
        return total / (len(nodes) * len(nodes))  # same float as the kubelet's sum/count

    def same_size_key(self, mask: int) -> tuple[float, int]:
        return (self.mean_distance(mask), mask) if self.closest else (0.0, mask)

    def preferred_key(self, mask: int) -> tuple[int, float, int]:
        return (mask.bit_count(), *self.same_size_key(mask))

    def non_preferred_key(self, mask: int, best_count: int) -> tuple[int, int, float, int]:
        size = mask.bit_count()
        tier = 0 if size == best_count else (1 if size < best_count else 2)
        return (tier, abs(size - best_count), *self.same_size_key(mask))

    @staticmethod
    def non_preferred_sizes(best_count: int, largest: int) -> Iterator[int]:
        """Sizes in the order the non-preferred ranking visits them (lazily: the first usually wins)."""
        first = (best_count,) if 1 <= best_count <= largest else ()
        return chain(first, range(min(best_count - 1, largest), 0, -1), range(max(best_count + 1, 1), largest + 1))
