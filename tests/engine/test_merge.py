"""Topology Manager merge: golden cases ported from the kubelet's policy tests, plus our API.

Cases restate ``pkg/kubelet/cm/topologymanager/policy_test.go`` (common, best-effort,
"no policies", closest-NUMA and single-numa-node tables, ``TestMaxOfMinAffinityCounts``)
and the §5.4 table of the project's reference notes. Each case is also run through the
naive oracle so a mistake in a transcription cannot hide a mismatch between the two.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from naive_merge import naive_merge

from nri_pinner.engine.errors import TopologyAffinityError
from nri_pinner.engine.topologymanager.hints import (
    HintRequest,
    ResourceHints,
    StaticHintProvider,
    TopologyHint,
    count,
    format_mask,
    is_narrower_than,
    mask_of,
    nodes_of,
    parse_static_hints,
)
from nri_pinner.engine.topologymanager.merge import (
    MergeResult,
    Policy,
    TopologyManager,
    best_non_preferred_count,
    describe,
    merge,
    merge_container,
    merge_pod,
)

T, F = True, False
TWO = (0, 1)
FOUR = (0, 1, 2, 3)
EIGHT = tuple(range(8))
NODES = (0, 1, 2)  # the machine the best-effort table runs on
ALL = NODES  # "all NUMA nodes" (the kubelet's default affinity)
# commonNUMAInfoEightNodes (its rows 0-3 are commonNUMAInfoFourNodes); row 7 is asymmetric upstream too.
EIGHT_DISTANCES = [
    [10, 11, 12, 12, 30, 30, 30, 30],
    [11, 10, 12, 12, 30, 30, 30, 30],
    [12, 12, 10, 11, 30, 30, 30, 30],
    [12, 12, 11, 10, 30, 30, 30, 30],
    [30, 30, 30, 30, 10, 11, 12, 12],
    [30, 30, 30, 30, 11, 10, 12, 12],
    [30, 30, 30, 30, 12, 12, 10, 11],
    [30, 30, 30, 30, 12, 12, 13, 10],
]


def h(nodes: Sequence[int] | None, preferred: bool) -> TopologyHint:
    return TopologyHint(None if nodes is None else mask_of(nodes), preferred)


def p(**resources: list[TopologyHint] | None) -> ResourceHints:
    """One provider answering for the given resources."""
    return dict(resources)


def run(policy: str, nodes: Sequence[int], providers: Sequence[ResourceHints | None], *,
        closest: bool = False) -> MergeResult:
    distance = (lambda a, b: EIGHT_DISTANCES[a][b]) if closest else (lambda a, b: 10 if a == b else 20)
    manager = TopologyManager(Policy(policy), tuple(nodes), closest, distance)
    result = merge(manager, providers)
    naive_in = [None if pr is None else {k: None if v is None else [(x.affinity, x.preferred) for x in v]
                                         for k, v in pr.items()} for pr in providers]
    (mask, preferred), admit = naive_merge(policy, nodes, naive_in, prefer_closest=closest, distance=distance)
    assert (result.hint.affinity, result.hint.preferred, result.admit) == (mask, preferred, admit)
    return result


# (name, providers, expected hint) — commonPolicyMergeTestCases, valid for every merging policy
COMMON = [
    ("same mask both preferred 1/2", [p(r1=[h([0], T)]), p(r2=[h([0], T)])], h([0], T)),
    ("same mask both preferred 2/2", [p(r1=[h([1], T)]), p(r2=[h([1], T)])], h([1], T)),
    ("1 no hints, 1 single preferred 1/2", [{}, p(r=[h([0], T)])], h([0], T)),
    ("1 no hints, 1 single preferred 2/2", [{}, p(r=[h([1], T)])], h([1], T)),
    ("2 hints vs 1 matching 1/2", [p(r1=[h([0], T), h([1], T)]), p(r2=[h([0], T)])], h([0], T)),
    ("2 hints vs 1 matching 2/2", [p(r1=[h([0], T), h([1], T)]), p(r2=[h([1], T)])], h([1], T)),
    ("matching narrower preferred from both",
     [p(r1=[h([0], T), h([1], T)]), p(r2=[h([0], T), h([0, 1], F)])], h([0], T)),
    ("less narrow preferred beats narrower non-preferred",
     [p(r1=[h([1], T), h([0, 1], F)]), p(r2=[h([0], T), h([1], T), h([0, 1], F)])], h([1], T)),
    ("multiple resources, same provider",
     [p(r1=[h([1], T), h([0, 1], F)], r2=[h([0], T), h([1], T), h([0, 1], F)])], h([1], T)),
]

# bestEffortPolicy.mergeTestCases (also restricted's hints; restricted admits only preferred)
BEST_EFFORT = [
    ("2 hints each, same masks", [p(r1=[h([0, 1], T), h([0, 2], T)]), p(r2=[h([0, 1], T), h([0, 2], T)])],
     h([0, 1], T)),
    ("no providers", [], h(ALL, T)),
    ("provider returns empty map", [{}], h(ALL, T)),
    ("provider returns nil hints for a resource", [p(resource=None)], h(ALL, T)),
    ("provider returns empty hints for a resource", [p(resource=[])], h(ALL, F)),
    ("single nil preferred hint", [p(resource=[h(None, T)])], h(ALL, T)),
    ("single nil non-preferred hint", [p(resource=[h(None, F)])], h(ALL, F)),
    ("no common mask", [p(r1=[h([0], T)]), p(r2=[h([1], T)])], h(ALL, F)),
    ("same mask, one not preferred 1/2", [p(r1=[h([0], T)]), p(r2=[h([0], F)])], h([0], F)),
    ("same mask, one not preferred 2/2", [p(r1=[h([1], T)]), p(r2=[h([1], F)])], h([1], F)),
    ("wider mask, both preferred 1/2", [p(r1=[h([0], T)]), p(r2=[h([0, 1], T)])], h([0], F)),
    ("single non-preferred matching", [p(r1=[h([0], T), h([1], T)]), p(r2=[h([0, 1], F)])], h([0], F)),
    ("wider mask, both preferred 2/2", [p(r1=[h([1], T)]), p(r2=[h([0, 1], T)])], h([1], F)),
]

# bestNonPreferredAffinityCount cases on four NUMA nodes
NON_PREFERRED = [
    ("bestNonPreferredAffinityCount (1)", [p(r1=[h(FOUR, F), h([0, 1], F)]), p(r2=[h([0, 1], F)])],
     h([0, 1], F), h([0, 1], F)),
    ("bestNonPreferredAffinityCount (2)", [p(r1=[h(FOUR, F), h([0, 1], F)]), p(r2=[h([0, 3], F)])],
     h([0, 3], F), h([0, 3], F)),
    ("bestNonPreferredAffinityCount (3)", [p(r1=[h(FOUR, F), h([0, 1], F)]), p(r2=[h([1, 2], F)])],
     h([1, 2], F), h([1, 2], F)),
    ("bestNonPreferredAffinityCount (4)", [p(r1=[h(FOUR, F), h([0, 1], F)]), p(r2=[h([2, 3], F)])],
     h([2, 3], F), h([2, 3], F)),
    ("bestNonPreferredAffinityCount (5)",
     [p(r1=[h(FOUR, F), h([0, 1], F)]), p(r2=[h([1, 2], F), h([2, 3], F)])], h([1, 2], F), h([2, 3], F)),
    ("bestNonPreferredAffinityCount (6)",
     [p(r1=[h(FOUR, F), h([0, 1], F)]), p(r2=[h([1, 2, 3], F), h([1, 2], F), h([1, 3], F), h([2, 3], F)])],
     h([1, 2], F), h([2, 3], F)),
]

# singleNumaNodePolicy.mergeTestCases (two NUMA nodes)
SINGLE_NUMA = [
    ("no providers", [], h(None, T)),
    ("provider returns empty map", [{}], h(None, T)),
    ("nil hints for a resource", [p(resource=None)], h(None, T)),
    ("empty hints for a resource", [p(resource=[])], h(None, F)),
    ("single nil preferred hint", [p(resource=[h(None, T)])], h(None, T)),
    ("single nil non-preferred hint", [p(resource=[h(None, F)])], h(None, F)),
    ("no common mask", [p(r1=[h([0], T)]), p(r2=[h([1], T)])], h(None, F)),
    ("same mask, one not preferred 1/2", [p(r1=[h([0], T)]), p(r2=[h([0], F)])], h(None, F)),
    ("same mask, one not preferred 2/2", [p(r1=[h([1], T)]), p(r2=[h([1], F)])], h(None, F)),
    ("single non-preferred matching", [p(r1=[h([0], T), h([1], T)]), p(r2=[h([0, 1], F)])], h(None, F)),
    ("single NUMA hint generation",
     [p(r1=[h([0, 1], T)], r2=[h([0], T), h([1], T), h([0, 1], F)])], h(None, F)),
    ("one no-preference provider", [p(r1=[h([0], T), h([1], T), h([0, 1], F)]), None], h([0], T)),
]


@pytest.mark.parametrize("policy", ["best-effort", "restricted", "single-numa-node"])
@pytest.mark.parametrize(("name", "providers", "expected"), COMMON, ids=[c[0] for c in COMMON])
def test_common_cases(policy: str, name: str, providers: list[ResourceHints | None],
                      expected: TopologyHint) -> None:
    result = run(policy, TWO, providers)
    assert result.hint == expected
    assert result.admit and result.error is None


@pytest.mark.parametrize(("name", "providers", "expected"), BEST_EFFORT, ids=[c[0] for c in BEST_EFFORT])
def test_best_effort_and_restricted(name: str, providers: list[ResourceHints | None],
                                   expected: TopologyHint) -> None:
    best_effort = run("best-effort", NODES, providers)
    assert best_effort.hint == expected and best_effort.admit
    restricted = run("restricted", NODES, providers)
    assert restricted.hint == expected
    assert restricted.admit == expected.preferred
    assert (restricted.error is None) == expected.preferred
    if not restricted.admit:
        assert isinstance(restricted.error, TopologyAffinityError)
        assert restricted.error.reason == "TopologyAffinityError"


@pytest.mark.parametrize(("name", "providers", "narrowest", "closest"), NON_PREFERRED,
                         ids=[c[0] for c in NON_PREFERRED])
def test_best_non_preferred_affinity_count(name: str, providers: list[ResourceHints | None],
                                           narrowest: TopologyHint, closest: TopologyHint) -> None:
    assert run("best-effort", FOUR, providers).hint == narrowest
    assert run("best-effort", FOUR, providers, closest=True).hint == closest


def test_prefer_closest_numa_nodes_among_preferred() -> None:
    # mergeTestCasesClosestNUMA: equal width, lower mean distance wins over the lower mask.
    same = [p(r1=[h([0, 4], T), h([0, 2], T)]), p(r2=[h([0, 4], T), h([0, 2], T)])]
    assert run("best-effort", EIGHT, same, closest=True).hint == h([0, 2], T)
    # ... but a narrower mask still wins over a closer, wider one.
    different = [p(r1=[h([4], T), h([0, 2], T)]), p(r2=[h([4], T), h([0, 2], T)])]
    assert run("best-effort", EIGHT, different, closest=True).hint == h([4], T)
    # Without the option the lower mask value wins among equal widths.
    assert run("best-effort", EIGHT, [p(r=[h([4, 5], T), h([0, 4], T)])]).hint == h([0, 4], T)
    assert run("best-effort", EIGHT, [p(r=[h([4, 5], T), h([0, 4], T)])], closest=True).hint == h([4, 5], T)


@pytest.mark.parametrize(("name", "providers", "expected"), SINGLE_NUMA, ids=[c[0] for c in SINGLE_NUMA])
def test_single_numa_node(name: str, providers: list[ResourceHints | None], expected: TopologyHint) -> None:
    result = run("single-numa-node", TWO, providers)
    assert result.hint == expected
    assert result.admit == expected.preferred
    assert isinstance(result.error, TopologyAffinityError) != expected.preferred


def test_single_numa_node_ignores_prefer_closest() -> None:
    # The kubelet compares single-node masks by value even with prefer-closest-numa-nodes.
    providers: list[ResourceHints | None] = [p(r=[h([7], T), h([1], T)])]
    assert run("single-numa-node", EIGHT, providers, closest=True).hint == h([1], T)


def test_none_policy_admits_without_asking() -> None:
    class Exploding:
        name = "exploding"

        def hints(self, request: HintRequest) -> ResourceHints | None:
            raise AssertionError("the none policy must not consult providers")

    manager = TopologyManager(Policy.NONE, TWO)
    result = merge_container(manager, [Exploding()], HintRequest("pod", "c", exclusive_cpus=2))
    assert result == MergeResult(TopologyHint(None, False), True)
    assert merge(manager, [p(r=[])]).admit


@pytest.mark.parametrize(("hints", "expected"), [
    ([], 0),
    ([[h(None, T)]], 0),
    ([[h([0], T)]], 1),
    ([[h([0, 1], T)]], 2),
    ([[h([0, 1], T), h([0, 1, 2], T)]], 2),
    ([[h([0, 1], T), h([0, 1, 2], T)], [h([0, 1, 2], T)]], 3),
    ([[h([0, 1], T), h([0, 1, 2], T)], [h([0, 1, 2], T), h([0, 1, 2, 3], T)]], 3),
])
def test_max_of_min_affinity_counts(hints: list[list[TopologyHint]], expected: int) -> None:
    assert best_non_preferred_count([tuple(x) for x in hints]) == expected


def test_scopes_check_the_request_shape() -> None:
    manager = TopologyManager(Policy.RESTRICTED, TWO)
    provider = StaticHintProvider()
    gpu = {"gpu": (h([1], T),)}
    container = merge_container(manager, [provider], HintRequest("pod", "app", static_hints=gpu))
    pod = merge_pod(manager, [provider], HintRequest("pod", None, static_hints=gpu))
    assert container.hint == pod.hint == h([1], T)
    with pytest.raises(ValueError, match="use merge_pod"):
        merge_container(manager, [provider], HintRequest("pod", None))
    with pytest.raises(ValueError, match="use merge_container"):
        merge_pod(manager, [provider], HintRequest("pod", "app"))


def test_rejection_carries_topology_affinity_error() -> None:
    manager = TopologyManager(Policy.RESTRICTED, TWO)
    result = merge(manager, [p(r1=[h([0], T)]), p(r2=[h([1], T)])])
    assert not result.admit
    assert isinstance(result.error, TopologyAffinityError)
    assert "restricted" in str(result.error)
    assert describe(result).endswith("reject (TopologyAffinityError)")
    assert describe(merge(manager, [p(r=[h([0], T)])])) == "{0} preferred=True -> admit"


def test_manager_validation() -> None:
    with pytest.raises(ValueError, match="unknown topology manager policy 'strict'"):
        TopologyManager("strict", TWO)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one NUMA node"):
        TopologyManager(Policy.BEST_EFFORT, ())
    assert TopologyManager("best-effort", (3, 1, 1)).numa_nodes == (1, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be TopologyHint"):
        merge(TopologyManager(Policy.BEST_EFFORT, TWO), [{"r": [(1, True)]}])  # type: ignore[list-item]


def test_mask_helpers_follow_kubelet_bitmask() -> None:
    assert mask_of([0, 2]) == 0b101 and nodes_of(0b101) == [0, 2] and count(0b1011) == 3
    assert is_narrower_than(mask_of([1]), mask_of([0, 1]))
    assert is_narrower_than(mask_of([0, 1]), mask_of([0, 2]))
    # same width: the lower integer wins, so {1,2} is narrower than {0,3}
    assert is_narrower_than(mask_of([1, 2]), mask_of([0, 3]))
    assert not is_narrower_than(mask_of([0, 3]), mask_of([1, 2]))
    assert not is_narrower_than(mask_of([1]), mask_of([1]))
    assert format_mask(None) == "any" and format_mask(0b110) == "{1,2}"
    with pytest.raises(ValueError, match="non-negative"):
        mask_of([-1])


def test_hint_validation() -> None:
    with pytest.raises(ValueError, match="non-empty NUMA mask"):
        TopologyHint(0, True)
    with pytest.raises(ValueError, match="must be a bool"):
        TopologyHint(1, 1)  # type: ignore[arg-type]
    assert str(TopologyHint(0b11, False)) == "{0,1} (not preferred)"


def test_parse_static_hints() -> None:
    parsed = parse_static_hints({
        "vendor.com/gpu": [{"numa": [0], "preferred": True}, {"numa": [0, 1], "preferred": False}],
        "vendor.com/nic": [{"numa": [1]}, {"numa": None, "preferred": False}],
        "vendor.com/any": None,
    })
    assert parsed == {
        "vendor.com/gpu": (h([0], T), h([0, 1], F)),
        "vendor.com/nic": (h([1], T), h(None, F)),
        "vendor.com/any": None,
    }
    manager = TopologyManager(Policy.SINGLE_NUMA_NODE, TWO)
    request = HintRequest("pod", "c", static_hints=parsed)
    assert merge_container(manager, [StaticHintProvider()], request).hint == h(None, F)


@pytest.mark.parametrize(("data", "message"), [
    ({"gpu": {"numa": [0]}}, "must be a list"),
    ({"gpu": [[0]]}, r"hints\['gpu'\]\[0\] must be an object"),
    ({"gpu": [{"numa": []}]}, "non-empty list"),
    ({"gpu": [{"numa": [0], "preferred": "yes"}]}, "true or false"),
    ({"gpu": [{"numa": ["a"]}]}, "non-negative integers"),
    ({"gpu": [{"nodes": [0]}]}, "unknown key"),
])
def test_parse_static_hints_errors(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_static_hints(data)
