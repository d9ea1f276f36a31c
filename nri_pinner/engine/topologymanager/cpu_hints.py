"""CPU topology hints, as the kubelet's static policy generates them.

The kubelet (``generateCPUTopologyHints``) walks every non-empty NUMA mask:
a mask is a hint when it holds every reusable CPU and
``len(reusable) + free CPUs in the mask >= request``; a hint is preferred when
its size equals ``minAffinitySize`` (fewest NUMA nodes whose *total* CPUs could
hold the request), or, with align-by-socket, when it spans exactly
``ceil(minAffinitySize / numa_per_socket)`` sockets.

On 16 NUMA nodes that walk is 65,535 masks. The hint set is an *up-set*
(adding a node never removes CPUs), so :class:`CPUTopologyHints` keeps it
implicit: per-node free counts plus a threshold. Iterating it still yields the
kubelet's exact list in the kubelet's order; the merge instead asks it
structural questions (is this mask a hint? which masks of size k inside X are
hints, in mask order?) and never enumerates what cannot win.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import overload

from ..cpuset import EMPTY, CPUSet
from ..topology.model import Topology
from .hints import HintRequest, ResourceHints, TopologyHint, nodes_of
from .implicit_merge import UpForm
from .subsets import _combinations_reaching, _heaviest_table, _subsets_ascending

_ONE_NODE: dict[int, TopologyHint] = {}


def preferred_one_node(node: int) -> TopologyHint:
    """The preferred hint for one NUMA node, shared (hints are frozen): single-numa-node merges ask
    for them on every admission, and building one costs more than the rest of that step."""
    hint = _ONE_NODE.get(node)
    if hint is None:
        hint = _ONE_NODE[node] = TopologyHint(1 << node, True)
    return hint


class CPUTopologyHints(Sequence[TopologyHint]):
    """The kubelet's CPU hint list, held as "mask ⊇ required and weight(mask) >= threshold"."""

    def __init__(self, *, node_weights: dict[int, int], required: int, threshold: int,
                 min_affinity: int, node_sockets: dict[int, int], min_sockets: int | None) -> None:
        self.nodes = tuple(sorted(node_weights))
        universe = 0
        for n in self.nodes:
            universe |= 1 << n
        self.universe = universe
        self.required = required
        self.threshold = threshold
        self.min_affinity = min_affinity
        self.min_sockets = min_sockets  # None unless align-by-socket can apply
        self._w = node_weights
        self._sockets = node_sockets
        self._narrowest: int | None = -1  # -1: not worked out yet
        self._sums: dict[int, int] = {}  # weight per mask: a merge asks the same masks size after size

    # -- membership ----------------------------------------------------------
    def weight(self, mask: int) -> int:
        w = self._w
        if mask & (mask - 1) == 0:  # one node (single-numa-node asks node by node)
            return w[mask.bit_length() - 1] if mask else 0
        found = self._sums.get(mask)
        if found is None:
            found = 0
            for n in self.nodes:  # a plain loop: half the cost of summing a generator over nodes_of
                if mask >> n & 1:
                    found += w[n]
            self._sums[mask] = found
        return found

    def is_hint(self, mask: int) -> bool:
        return (mask != 0 and mask & ~self.universe == 0 and mask & self.required == self.required
                and self.weight(mask) >= self.threshold)

    def is_preferred(self, mask: int) -> bool:
        """Preference of a mask already known to be a hint."""
        return mask.bit_count() == self.min_affinity or self._socket_aligned(mask)

    def _socket_aligned(self, mask: int) -> bool:
        if self.min_sockets is None:
            return False
        sockets = 0
        for n in nodes_of(mask):
            sockets |= self._sockets[n]
        return sockets.bit_count() == self.min_sockets

    @cached_property
    def single_node_hints(self) -> tuple[TopologyHint, ...]:
        """The preferred one-node hints (single-numa-node keeps only those), kept: a rejection's
        explanation merges the same answers again once per provider."""
        if type(self) is not CPUTopologyHints:  # memory and device lists judge masks their own way
            return tuple(TopologyHint(1 << n, True) for n in self.nodes
                         if self.is_hint(1 << n) and self.is_preferred(1 << n))
        # is_hint and is_preferred for one node, inlined (asked on every single-numa-node merge)
        required, threshold, w = self.required, self.threshold, self._w
        if required & (required - 1):
            return ()  # reusable CPUs on two nodes: no one-node hint
        out = []
        for n in self.nodes:
            if required & ~(1 << n) or w[n] < threshold:
                continue
            if self.min_affinity == 1 or (self.min_sockets is not None
                                          and self._sockets[n].bit_count() == self.min_sockets):
                out.append(preferred_one_node(n))
        return tuple(out)

    @property
    def narrowest_count(self) -> int | None:
        """Fewest NUMA nodes of any hint (``None``: no hint at all), worked out once (every merge
        asks; a plain attribute, as functools.cached_property takes a lock on Python 3.11)."""
        found = self._narrowest
        if found == -1:
            found = self._narrowest = self._find_narrowest()
        return found

    def _find_narrowest(self) -> int | None:
        """Greedy is exact: for a given size the heaviest nodes give the most CPUs."""
        if self.required & ~self.universe:  # a reusable CPU on a node without online CPUs
            return None
        size = self.required.bit_count()
        total = self.weight(self.required)
        rest = sorted((self._w[n] for n in nodes_of(self.universe & ~self.required)) if self.required
                      else self._w.values(), reverse=True)
        for w in rest:
            if total >= self.threshold and size > 0:
                break
            total += w
            size += 1
        if total < self.threshold or size == 0:
            return None
        return size

    @cached_property
    def up_form(self) -> UpForm:  # kept: a rejection's explanation merges again per provider
        """This list as an up-set form (the merge's search over several implicit sources)."""
        return UpForm(self.universe, self.required, {n: (w,) for n, w in self._w.items()}, (self.threshold,))

    # -- structured enumeration (used by the merge) --------------------------
    def _projection(self, within: int, size: int) -> tuple[int, int, int, int] | None:
        """What a search for masks R ⊆ ``within`` of ``size`` nodes starts from: (the required nodes
        inside, the other nodes inside, how many of those to add, the CPUs they must bring), or
        ``None`` when no such R can qualify."""
        if self.narrowest_count is None or size <= 0:
            return None
        inside = within & self.universe
        forced = self.required & inside
        rest = inside & ~forced
        free_slots = size - forced.bit_count()
        if free_slots < 0 or free_slots > rest.bit_count():
            return None
        need = self.threshold - self.weight(self.universe & ~within) - self.weight(forced)
        return forced, rest, free_slots, need

    def masks_within(self, within: int, size: int) -> Iterator[int]:
        """Masks R ⊆ ``within`` of ``size`` nodes, ascending, for which some hint C has C ∩ within = R.

        Hints are an up-set, so such a C exists iff R ∪ (universe ∖ within) is
        a hint: that is the test, no enumeration of C needed.
        """
        start = self._projection(within, size)
        if start is None:
            return
        forced, rest, free_slots, need = start
        candidates = nodes_of(rest)
        if free_slots == 1:  # one node to add (the usual non-preferred answer): ascending, no bound table
            w = self._w
            for n in candidates:
                if w[n] >= need:
                    yield forced | 1 << n
            return
        weights = [self._w[n] for n in candidates]
        for subset in _subsets_ascending(candidates, weights, free_slots, need):
            yield forced | subset

    def first_within(self, within: int, size: int) -> int | None:
        """The first (lowest) mask ``masks_within`` yields, or ``None``: what the merge without
        prefer-closest-numa-nodes asks, answered without building a generator."""
        if type(self) is not CPUTopologyHints:  # memory hint lists judge masks their own way
            return next(self.masks_within(within, size), None)
        start = self._projection(within, size)
        if start is None:
            return None
        forced, rest, free_slots, need = start
        if free_slots != 1:
            return next(self.masks_within(within, size), None)
        w = self._w
        while rest:  # ascending nodes: the first heavy enough one gives the lowest mask
            low = rest & -rest
            if w[low.bit_length() - 1] >= need:
                return forced | low
            rest ^= low
        return None

    def closest_within(self, within: int, size: int, distance: Mapping[int, Mapping[int, int]]) -> int | None:
        """Among the masks ``masks_within`` yields, the one with the least summed NUMA distance.

        Ties go to the lowest mask (enumeration is ascending and only a strictly
        smaller sum replaces the best). A branch is cut when its exact partial sum
        plus a lower bound for the rest (the cheapest remaining nodes' exact cost
        against what is chosen, plus the smallest distance for pairs among them)
        already reaches the best sum: with all remote distances equal the first
        feasible mask is the answer and everything after it is cut at once. For one size the kubelet's mean
        (sum / size², a double) orders exactly like the integer sum: neighbouring
        means differ by >= 1/size² >= 2^-12, far above double spacing for means
        below 2^40, so distinct sums never round to equal means.
        """
        projection = self._projection(within, size)
        if projection is None:
            return None
        forced, rest, free_slots, need = projection
        candidates = nodes_of(rest)
        weights = [self._w[n] for n in candidates]
        heaviest = _heaviest_table(weights)
        pool = nodes_of(forced | rest)
        min_pair = min((distance[a][b] for a in pool for b in pool if a != b), default=0)
        chosen = nodes_of(forced)
        start = sum(distance[a][b] for a in chosen for b in chosen)
        # cost[j]: what candidate j adds to the sum if taken now (self distance + pairs with chosen)
        cost = [distance[n][n] + sum(distance[n][c] + distance[c][n] for c in chosen) for n in candidates]
        pair = [[distance[a][b] + distance[b][a] for b in candidates] for a in candidates]
        best_sum, best_mask = -1, None

        def pick(limit: int, slots: int, short: int, acc: int, partial: int) -> None:
            nonlocal best_sum, best_mask
            if slots == 0:
                if short <= 0 and (best_mask is None or partial < best_sum):
                    best_sum, best_mask = partial, acc
                return
            rest = slots - 1
            for i in range(rest, limit):
                if weights[i] + heaviest[i][rest] < short:
                    continue
                total = partial + cost[i]
                row = pair[i]
                if best_mask is not None:
                    # lower bound: the `rest` cheapest nodes below i, each paying its cost with i
                    # taken too, plus the least possible pairs among themselves.
                    # >=: masks come in ascending order, so an equal sum found later never wins
                    floor = sum(sorted(cost[j] + row[j] for j in range(i))[:rest]) if rest else 0
                    if total + floor + rest * (rest - 1) * min_pair >= best_sum:
                        continue
                for j in range(i):
                    cost[j] += row[j]
                pick(i, rest, short - weights[i], acc | (1 << candidates[i]), total)
                for j in range(i):
                    cost[j] -= row[j]

        pick(len(candidates), free_slots, need, forced, start)
        return best_mask

    def preferred_layers(self) -> Iterator[tuple[int, Iterator[int]]]:
        """Preferred hints grouped by size (ascending), each group in ascending mask order."""
        low = self.narrowest_count
        if low is None:
            return
        for size in range(low, len(self.nodes) + 1):
            if size == self.min_affinity:
                yield size, self.masks_within(self.universe, size)
            elif self.min_sockets is not None:
                yield size, filter(self._socket_aligned, self.masks_within(self.universe, size))

    # -- Sequence: the kubelet's list, in the kubelet's order -----------------
    def __iter__(self) -> Iterator[TopologyHint]:
        # is_hint inlined: status summaries walk the first hints of every admission. No hint is
        # narrower than narrowest_count, so smaller sizes (C(16, k) masks each) are skipped.
        low = self.narrowest_count
        if low is None:
            return
        weights = [self._w[n] for n in self.nodes]
        for size in range(low, len(self.nodes) + 1):
            for mask in _combinations_reaching(self.nodes, weights, self.required, size, self.threshold):
                yield TopologyHint(mask, self.is_preferred(mask))

    @cached_property
    def _materialized(self) -> tuple[TopologyHint, ...]:
        return tuple(iter(self))

    def __len__(self) -> int:
        return len(self._materialized)

    def __bool__(self) -> bool:
        return self.narrowest_count is not None

    @overload
    def __getitem__(self, index: int) -> TopologyHint: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[TopologyHint]: ...
    def __getitem__(self, index: int | slice) -> TopologyHint | Sequence[TopologyHint]:
        return self._materialized[index]

    def __repr__(self) -> str:
        return (f"CPUTopologyHints(weights={self._w}, required={self.required:#x}, "
                f"threshold={self.threshold}, min_affinity={self.min_affinity})")


def cpu_topology_hints(topology: Topology, available: CPUSet, reusable: CPUSet, request: int, *,
                       full_pcpus_only: bool = False, align_by_socket: bool = False) -> CPUTopologyHints:
    """The kubelet's ``generateCPUTopologyHints`` for ``request`` exclusive CPUs.

    Only online CPUs count toward a NUMA node's size (the kubelet's topology
    comes from cAdvisor, which sees online CPUs). ``full_pcpus_only`` is an
    nri-pinner extension (the kubelet ignores SMT when generating hints and
    fails later in Allocate): free CPUs count only as whole free cores.
    """
    if request < 1:
        raise ValueError(f"CPU request must be >= 1 to generate hints, got {request}")
    free, reused = available.mask, reusable.mask
    if (free | reused) & ~topology.all_cpus.mask:
        unknown = (available | reusable) - topology.all_cpus
        raise ValueError(f"CPUs {unknown} are not in the topology (known: {topology.all_cpus})")
    numa, running = topology.online_numa
    if not numa:
        raise ValueError("topology has no online CPUs")
    if full_pcpus_only:
        online = topology.online.mask
        usable = free | reused
        whole = 0
        for core in topology.core_cpus.values():
            if core.mask & online & ~usable == 0:  # every online thread of the core is free
                whole |= core.mask
        free &= whole
    weights = {n: (free & m).bit_count() for n, m in numa}

    required = 0
    if reused:
        for cpu in reusable:
            required |= 1 << topology.by_cpu[cpu].numa

    # minAffinitySize: fewest nodes whose total CPUs could hold the request; all nodes if none can.
    min_affinity = min(bisect.bisect_left(running, request) + 1, len(numa))

    node_sockets: dict[int, int] = {}
    min_sockets: int | None = None
    if align_by_socket:
        online = topology.online.mask
        node_masks = {n: m & online for n, m in numa}
        socket_masks = [cpus.mask & online for cpus in topology.socket_cpus.values()]
        socket_masks = [m for m in socket_masks if m]
        per_socket = len(numa) // len(socket_masks)
        if per_socket > 0:
            min_sockets = -(-min_affinity // per_socket)
        for n, _ in numa:
            node_sockets[n] = sum(1 << i for i, m in enumerate(socket_masks) if m & node_masks[n])

    return CPUTopologyHints(node_weights=weights, required=required, threshold=request - reused.bit_count(),
                            min_affinity=min_affinity, node_sockets=node_sockets, min_sockets=min_sockets)


class CPUHintProvider:
    """Hint provider for exclusive CPUs; ``available`` returns the currently assignable CPUs."""

    name = "cpu"

    def __init__(self, topology: Topology, available: Callable[[], CPUSet], *,
                 full_pcpus_only: bool = False, align_by_socket: bool = False) -> None:
        self._topology = topology
        self._available = available
        self._full_pcpus_only = full_pcpus_only
        self._align_by_socket = align_by_socket

    def hints(self, request: HintRequest) -> ResourceHints | None:
        wanted = request.exclusive_cpus
        if wanted == 0:
            return None  # shared-pool container: no preference
        if request.allocation_conflict:
            return {"cpu": ()}
        if request.allocated_cpus is not None:
            if len(request.allocated_cpus) != wanted:
                return {"cpu": ()}  # kubelet: cannot be satisfied (rejected unless best-effort)
            available, reusable = request.allocated_cpus, EMPTY
        else:
            available, reusable = self._available(), request.reusable_cpus
        return {"cpu": cpu_topology_hints(self._topology, available, reusable, wanted,
                                          full_pcpus_only=self._full_pcpus_only,
                                          align_by_socket=self._align_by_socket)}
