# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)
"""``closest_within`` (prefer-closest-numa-nodes' search) equals brute force: the least summed
distance among reachable masks of one size, ties to the lowest mask (issue 21, item 7 made
its pruning tighter, so this pins that nothing it cuts could have won)."""

from __future__ import annotations

from itertools import combinations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_pinner.engine.topologymanager.cpu_hints import CPUTopologyHints


def brute(h: CPUTopologyHints, within: int, size: int, dist: dict[int, dict[int, int]]) -> int | None:
    outside = h.universe & ~within
    best: tuple[int, int] | None = None
    for combo in combinations([n for n in h.nodes if within >> n & 1], size):
        mask = sum(1 << n for n in combo)
        if not h.is_hint(mask | outside):
            continue
        key = (sum(dist[a][b] for a in combo for b in combo), mask)
        best = key if best is None or key < best else best
    return None if best is None else best[1]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_closest_within_equals_brute_force(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 11))
    nodes = list(range(n))
    weights = {x: data.draw(st.integers(0, 8)) for x in nodes}
    required = sum(1 << x for x in nodes if data.draw(st.integers(0, 9)) == 0)
    threshold = data.draw(st.integers(1, max(1, sum(weights.values()))))
    family = CPUTopologyHints(node_weights=weights, required=required, threshold=threshold, min_affinity=1,
                              node_sockets={x: 1 for x in nodes}, min_sockets=None)
    remote = st.sampled_from([11, 12, 20, 21, 32]) if data.draw(st.booleans()) else st.just(20)
    dist = {a: {b: 10 if a == b else data.draw(remote) for b in nodes} for a in nodes}
    within = data.draw(st.integers(1, (1 << n) - 1))
    size = data.draw(st.integers(1, n))
    assert family.closest_within(within, size, dist) == brute(family, within, size, dist)
