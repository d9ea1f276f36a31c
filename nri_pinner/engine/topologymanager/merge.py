"""Topology Manager: merge providers' NUMA hints and admit or reject, as the kubelet does.

The kubelet takes the cross product of every provider's hints, ANDs each
permutation's masks (``None`` = all nodes) and keeps the best merged hint; the
merged hint is preferred only if every hint in it is preferred *and* every
non-``None`` mask is the same. It refuses more than 8 NUMA nodes because that
cross product explodes. We return the kubelet's exact answer without it:

1. *The kubelet's comparison is a total order.* Reading ``HintMerger.compare``
   case by case: any preferred hint beats any non-preferred one; preferred
   hints rank by (size, mask value) — or (size, mean NUMA distance, mask
   value) with ``prefer-closest-numa-nodes``; non-preferred hints rank first
   by size tier relative to B = ``bestNonPreferredAffinityCount`` (size == B,
   then sizes below B largest first, then sizes above B smallest first) and
   then like preferred ones. Every pairwise decision agrees with that ranking,
   so the result is its maximum whatever order the permutations come in; we
   may search for the maximum any way we like, and stop at the first element
   of a sorted enumeration.
2. *Preferred phase.* A preferred merged hint needs one shared mask M that
   every provider offers as a preferred hint (or a provider offers a
   preferred ``None``, which lets it agree with anything). So the candidates
   are the intersection of providers' preferred-mask sets — a set
   intersection, not a product. If any candidate is non-empty, the best of
   them is the answer and no non-preferred permutation needs looking at.
3. *Non-preferred phase* (no preferred merged hint exists). Now every merged
   hint is non-preferred, so a hint's preferred flag no longer matters and
   hints with equal masks within a provider are interchangeable: we fold the
   providers one at a time into the *set* of reachable ANDs (at most 2^N
   distinct values, usually a handful) instead of a product of lists.
4. *CPU hints stay implicit.* They form an up-set (adding a node never
   removes CPUs), so for a reachable AND X of the other providers, a mask
   R ⊆ X is reachable through some CPU hint iff R ∪ (CPU nodes ∖ X) is itself
   a CPU hint. We enumerate candidate R in rank order (size tier by tier,
   ascending mask value inside a tier) and stop at the first tier that has
   one. This is what lets 16 NUMA nodes (65,535 CPU hints) finish in
   milliseconds with no pruning that could change the result.
5. *Device-rule hints stay implicit too* (``upset_hints.py``): "every mask holding these nodes" is an
   interval of masks, and ANDs of intervals are intervals, so the non-preferred phase folds
   intervals instead of 2^15 masks per NIC on 16 NUMA nodes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from ..errors import TopologyAffinityError
from ..topology.model import Topology
from .cpu_hints import CPUTopologyHints
from .hints import HintProvider, HintRequest, ResourceHints, TopologyHint, format_mask, mask_of
from .implicit_merge import best_non_preferred_implicit
from .order import Distance, _Order
from .upset_hints import UpSetHints, best_non_preferred_in_intervals, fold


class Policy(StrEnum):
    NONE = "none"
    BEST_EFFORT = "best-effort"
    RESTRICTED = "restricted"
    SINGLE_NUMA_NODE = "single-numa-node"


def _default_distance(a: int, b: int) -> int:
    return 10 if a == b else 20


@dataclass(frozen=True)
class TopologyManager:
    """Policy, NUMA nodes and options of one Topology Manager."""

    policy: Policy
    numa_nodes: tuple[int, ...]
    prefer_closest_numa_nodes: bool = False
    distance: Distance = field(default=_default_distance, compare=False)
    default_mask: int = field(init=False, repr=False, compare=False)  # all NUMA nodes
    # request-independent work kept across merges (the ranking, with its N² distance table)
    memo: dict[object, object] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "policy", Policy(self.policy))
        except ValueError:
            valid = ", ".join(p.value for p in Policy)
            raise ValueError(f"unknown topology manager policy {self.policy!r} (valid: {valid})") from None
        if not self.numa_nodes:
            raise ValueError("topology manager needs at least one NUMA node")
        object.__setattr__(self, "numa_nodes", tuple(sorted(set(self.numa_nodes))))
        object.__setattr__(self, "default_mask", mask_of(self.numa_nodes))

    @classmethod
    def from_topology(cls, topology: Topology, policy: Policy | str, *,
                      prefer_closest_numa_nodes: bool = False) -> TopologyManager:
        return cls(Policy(policy), tuple(topology.numa_nodes), prefer_closest_numa_nodes, topology.distance)


@dataclass(frozen=True)
class MergeResult:
    hint: TopologyHint
    admit: bool
    error: TopologyAffinityError | None = None


ANY_PREFERRED = TopologyHint(None, True)
ANY_NOT_PREFERRED = TopologyHint(None, False)
Source = tuple[TopologyHint, ...] | CPUTopologyHints | UpSetHints


# -- entry points ---------------------------------------------------------------


def merge_container(manager: TopologyManager, providers: Sequence[HintProvider],
                    request: HintRequest) -> MergeResult:
    """Container scope: ``request.container`` names the container being admitted."""
    if request.container is None:
        raise ValueError("container scope needs request.container; use merge_pod for pod scope")
    return _admit(manager, providers, request)


def merge_pod(manager: TopologyManager, providers: Sequence[HintProvider],
              request: HintRequest) -> MergeResult:
    """Pod scope: ``request.container`` is None and the request holds the pod-level totals
    (``exclusive_cpus`` = max(largest init container, sum of app containers)); the
    result applies to every container of the pod."""
    if request.container is not None:
        raise ValueError(f"pod scope takes a pod-level request (container=None), got container "
                         f"{request.container!r}; use merge_container")
    return _admit(manager, providers, request)


def _admit(manager: TopologyManager, providers: Sequence[HintProvider], request: HintRequest) -> MergeResult:
    if manager.policy is Policy.NONE:  # the kubelet's "none" scope never asks the providers
        return MergeResult(ANY_NOT_PREFERRED, True)
    return merge(manager, [p.hints(request) for p in providers])


def merge(manager: TopologyManager, providers_hints: Sequence[ResourceHints | None]) -> MergeResult:
    """Merge one answer per provider under ``manager.policy``."""
    policy = manager.policy
    if policy is Policy.NONE:
        return MergeResult(ANY_NOT_PREFERRED, True)
    default = manager.default_mask
    single = policy is Policy.SINGLE_NUMA_NODE
    sources, order = _prepared(manager, providers_hints, single)
    hint = _best_hint(sources, default, order, single=single)
    if single and hint.affinity == default:
        hint = TopologyHint(None, hint.preferred)
    if policy is Policy.BEST_EFFORT or hint.preferred:
        return MergeResult(hint, True)
    return MergeResult(hint, False, TopologyAffinityError(
        f"Resources cannot be allocated with Topology locality (policy {policy.value}, best hint {hint})"))


def _prepared(manager: TopologyManager, providers_hints: Sequence[ResourceHints | None],
              single: bool) -> tuple[list[Source], _Order]:
    """The providers' hints as a merge reads them (single-numa-node: one-node hints only) and the
    ranking it uses (closest-first unless single-numa-node)."""
    sources = _filter_providers_hints(providers_hints)
    if single:
        sources = [_single_numa_hints(s) for s in sources]
    closest = manager.prefer_closest_numa_nodes and not single
    order = manager.memo.get(key := "order-closest" if closest else "order")  # built once per kind
    if not isinstance(order, _Order):
        order = manager.memo[key] = _Order(manager.distance, manager.numa_nodes, closest=closest)
    return sources, order


def admits(manager: TopologyManager, providers_hints: Sequence[ResourceHints | None]) -> bool:
    """``merge(...).admit`` without the non-preferred search: under restricted and single-numa-node
    a merge admits exactly when a preferred hint exists (a rejection's explanation asks this once
    per provider)."""
    policy = manager.policy
    if policy is Policy.NONE or policy is Policy.BEST_EFFORT:
        return True
    default = manager.default_mask
    sources, order = _prepared(manager, providers_hints, policy is Policy.SINGLE_NUMA_NODE)
    family, others, explicit = _split(sources, default)
    return _best_preferred(explicit, family, default, order, others) is not None


# -- filtering (kubelet filterProvidersHints / filterSingleNumaHints) ------------


def _filter_providers_hints(providers_hints: Iterable[ResourceHints | None]) -> list[Source]:
    sources: list[Source] = []
    for answer in providers_hints:
        if not answer:  # nil or empty map: no preference at all
            sources.append((ANY_PREFERRED,))
            continue
        for resource, hints in answer.items():
            if hints is None:
                sources.append((ANY_PREFERRED,))
            elif type(hints) is tuple and hints:  # the common explicit case first: the ABC checks cost
                for h in hints:
                    if not isinstance(h, TopologyHint):
                        raise TypeError(f"hints for {resource!r} must be TopologyHint, got {h!r}")
                sources.append(hints)
            elif isinstance(hints, CPUTopologyHints):
                sources.append(hints if hints else (ANY_NOT_PREFERRED,))
            elif isinstance(hints, UpSetHints):  # held implicitly (upset_hints.py); never empty
                sources.append(hints)
            elif len(hints) == 0:
                sources.append((ANY_NOT_PREFERRED,))
            else:
                for h in hints:
                    if not isinstance(h, TopologyHint):
                        raise TypeError(f"hints for {resource!r} must be TopologyHint, got {h!r}")
                sources.append(tuple(hints))
    return sources


def _single_numa_hints(source: Source) -> Source:
    if isinstance(source, tuple):  # a list, then a tuple: faster than tuple() over a generator
        return tuple([h for h in source if h.preferred and (h.affinity is None or h.affinity & (h.affinity - 1) == 0)])
    if isinstance(source, CPUTopologyHints):
        return source.single_node_hints
    return (TopologyHint(source.required, True),) if source.required.bit_count() == 1 else ()  # UpSetHints


def best_non_preferred_count(sources: Iterable[Source]) -> int:
    """The kubelet's ``maxOfMinAffinityCounts``: the largest of each provider's narrowest hint size."""
    best = 0
    for source in sources:
        if isinstance(source, tuple):  # the common case first (no ABC check); a loop, not min() over a generator
            fewest = 0  # 0: no hint with a mask (a mask holds at least one node)
            for h in source:
                if h.affinity is not None and (fewest == 0 or h.affinity.bit_count() < fewest):
                    fewest = h.affinity.bit_count()
        elif isinstance(source, CPUTopologyHints):
            fewest = source.narrowest_count or 0
        else:  # UpSetHints
            fewest = source.required.bit_count()
        best = max(best, fewest)
    return best


# -- the merge ------------------------------------------------------------------------


Explicit = list[tuple[TopologyHint, ...] | UpSetHints]


def _split(sources: list[Source], default: int) -> tuple[CPUTopologyHints | None, list[CPUTopologyHints], Explicit]:
    """(the implicit family the search walks, further implicit sources, explicit ones)."""
    family: CPUTopologyHints | None = None
    others: list[CPUTopologyHints] = []  # further implicit sources (device, memory hints)
    explicit: Explicit = []
    for source in sources:
        if type(source) is tuple:
            explicit.append(source)
        elif isinstance(source, CPUTopologyHints):
            if source.universe & ~default:
                explicit.append(tuple(source))
            elif family is None:
                family = source
            else:
                others.append(source)
        else:
            explicit.append(source)
    return family, others, explicit


def _best_hint(sources: list[Source], default: int, order: _Order, *, single: bool = False) -> TopologyHint:
    family, others, explicit = _split(sources, default)
    best = _best_preferred(explicit, family, default, order, others)
    if best is not None:
        return TopologyHint(best, True)
    if single:
        # single-numa-node leaves preferred one-node or "any" hints only: a non-zero AND of them is a
        # node every source offers (or lets through with "any"), which the preferred phase finds
        return TopologyHint(default, False)
    best = _best_non_preferred(explicit, family, default, order, best_non_preferred_count(sources), others)
    return TopologyHint(default if best is None else best, False)


def _best_preferred(explicit: list[tuple[TopologyHint, ...] | UpSetHints], family: CPUTopologyHints | None,
                    default: int, order: _Order, others: Sequence[CPUTopologyHints] = ()) -> int | None:
    def everywhere(m: int) -> bool:  # a preferred hint of every further implicit source too
        return all(o.is_hint(m) and o.is_preferred(m) for o in others)

    # Providers with a preferred "any" hint can agree with every mask; the others must all offer M.
    strict: list[set[int]] = []
    for source in explicit:
        if not isinstance(source, tuple):  # UpSetHints (tuple: no ABC check)
            strict.append({source.required})
            continue
        preferred: set[int] = set()
        for h in source:  # plain loops: this runs on every merge
            if h.preferred:
                if h.affinity is None:
                    break  # a preferred "any" (ANY_PREFERRED, found without __eq__) agrees with every mask
                preferred.add(h.affinity)
        else:
            strict.append(preferred)
    if family is None and not strict:
        offered = {h.affinity & default
                   for s in explicit for h in s if h.preferred and h.affinity is not None}
        return min((m for m in offered | {default} if m), key=order.preferred_key, default=None)
    if strict:
        if len(strict) > 1:
            strict.sort(key=len)
        agreed: list[int] = []
        for m in strict[0]:
            for other in strict[1:]:
                if m not in other:
                    break
            else:
                if (m & default and (family is None or (family.is_hint(m) and family.is_preferred(m)))
                        and (not others or everywhere(m))):
                    agreed.append(m & default)
        return min(agreed, key=order.preferred_key, default=None)
    assert family is not None
    for size, layer in family.preferred_layers():
        if any(o.min_sockets is None and o.min_affinity != size for o in others):
            continue  # such a source prefers only masks of its min_affinity size: none of this layer
        if others:
            layer = filter(everywhere, layer)
        first = next(layer, None)
        if first is None:
            continue
        if not order.closest:  # layers come smallest first, masks ascending: the first is the best
            return first
        if size == family.min_affinity and not others:  # every hint of this size is preferred
            return family.closest_within(family.universe, size, order.table)
        return min(itertools.chain([first], layer), key=order.same_size_key)
    return None


def _best_non_preferred(explicit: list[tuple[TopologyHint, ...] | UpSetHints], family: CPUTopologyHints | None,
                        default: int, order: _Order, best_count: int,
                        others: Sequence[CPUTopologyHints] = ()) -> int | None:
    # Several implicit sources, or a family that is not a plain up-set (memory hints: an up-set inside
    # the unused pool plus used-node masks) meeting up-set intervals: test candidates in rank order.
    has_upset = any([not isinstance(s, tuple) for s in explicit])  # UpSetHints (list: cheaper than a generator)
    if others or (has_upset and family is not None and type(family) is not CPUTopologyHints):
        intervals = {(default, default)}
        for source in explicit:
            intervals = fold(intervals, source, default)
        forms = [s.up_form for s in ([family] if family is not None else []) + list(others)]
        return best_non_preferred_implicit(intervals, forms, order, best_count, default.bit_count())
    if has_upset:
        # interval fold (upset_hints.py); with further implicit sources the general path below lists them
        intervals = {(default, default)}
        for source in explicit:
            intervals = fold(intervals, source, default)
            if not intervals:
                return None
        largest = len(family.nodes) if family is not None else default.bit_count()
        return best_non_preferred_in_intervals(intervals, family, order, best_count, largest)
    # Explicit lists only from here on. AND is order-free; small sources first keep the set small.
    reachable = {default}
    for source in sorted(explicit, key=len) if len(explicit) > 1 else explicit:
        folded: set[int] = set()
        for h in source:  # tuples only here (has_upset is False)
            mask = h.affinity
            if mask is None:  # "any": ANDs to what is already reachable
                folded |= reachable
                continue
            for r in reachable:
                if r & mask:
                    folded.add(r & mask)
        reachable = folded
        if not reachable:
            return None
    if family is None:
        return min(reachable, key=lambda m: order.non_preferred_key(m, best_count))
    universe = family.universe
    for size in order.non_preferred_sizes(best_count, len(family.nodes)):
        found: list[int] = []
        for within in reachable:
            if (within & universe).bit_count() < size:
                continue  # no mask of this size inside: both searches would find none
            if order.closest:
                best = family.closest_within(within, size, order.table)
            else:
                best = family.first_within(within, size)
            if best is not None:
                found.append(best)
        if found:  # same size: without distances the lowest mask ranks first
            return min(found, key=order.same_size_key) if order.closest else min(found)
    return None


def describe(result: MergeResult) -> str:
    """One line for logs and ``simulate`` output."""
    verdict = "admit" if result.admit else f"reject ({result.error.reason if result.error else '?'})"
    return f"{format_mask(result.hint.affinity)} preferred={result.hint.preferred} -> {verdict}"
