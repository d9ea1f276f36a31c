"""Explaining a merge: each provider's hints in short form, and which provider a rejection is on.

The kubelet's ``TopologyAffinityError`` names no resource. Here a rejection names the
provider(s) whose removal alone would let the merge admit; when that is several (a conflict
such as "the GPU is on node 1, free CPUs only on node 0"), the fixed facts (devices the
container already holds) are listed last, so the provider that ran out is named first.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace

from ..errors import TopologyAffinityError
from .cpu_hints import CPUTopologyHints
from .hints import ResourceHints, TopologyHint, format_mask
from .merge import MergeResult, TopologyManager, admits

FIXED = ("devices", "static")  # providers describing what the container already has


def summarize(answer: ResourceHints | None, limit: int = 6) -> dict[str, str]:
    """``{resource: "{0} {1} {0,1}~ …"}`` (``~`` = not preferred); ``any`` for no preference."""
    if not answer:
        return {}
    out: dict[str, str] = {}
    for resource, hints in answer.items():
        if hints is None:
            out[resource] = "any"
            continue
        head = list(itertools.islice(iter(hints), limit + 1))
        if not head:
            out[resource] = "none"
            continue
        text = " ".join(format_mask(h.affinity) + ("" if h.preferred else "~") for h in head[:limit])
        out[resource] = text + (" …" if len(head) > limit else "")
    return out


class HintSummaries(Mapping[str, Mapping[str, str]]):
    """``{provider: summarize(its hints)}``, formatted when first read rather than while the runtime
    waits for the reply (it was a third of a four-provider admission on 16 NUMA nodes). The providers
    are known at once; the answers are kept until then (small: lazy hint lists hold counts and masks)."""

    __slots__ = ("_answers", "_names", "_text")

    def __init__(self, names: Sequence[str], answers: Sequence[ResourceHints | None]) -> None:
        pairs = [(n, a) for n, a in zip(names, answers, strict=True) if a]
        self._names = tuple(dict.fromkeys(n for n, _ in pairs))
        self._answers: tuple[tuple[str, ResourceHints], ...] | None = tuple(pairs)
        self._text: dict[str, dict[str, str]] | None = None

    def _summaries(self) -> dict[str, dict[str, str]]:
        # Another thread (the status server) may read it at the same time: the answers are taken
        # before the text is looked at, and the text is stored before the answers are let go.
        answers = self._answers
        text = self._text
        if text is None:
            text = {name: summarize(answer) for name, answer in answers or ()}
            self._text = text
            self._answers = None
        return text

    def settle(self) -> None:
        """Format now (when the node is idle: a decision otherwise keeps its providers' answers, about
        five times the text's size, until status reads it)."""
        self._summaries()

    @property
    def settled(self) -> bool:
        """Nothing left to format (formatted, or no provider answered)."""
        return not self._answers

    def __getitem__(self, provider: str) -> Mapping[str, str]:
        return self._summaries()[provider]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"HintSummaries({self._summaries()!r})"


def settle_all(summaries: Iterable[HintSummaries]) -> None:
    """Format each now (the node thread's idle work); one that fails is left for status to report."""
    for summary in summaries:
        with contextlib.suppress(Exception):
            summary.settle()


def blame(manager: TopologyManager, names: Sequence[str], answers: Sequence[ResourceHints | None]) -> list[str]:
    """Providers (``name`` or ``name[resource]``) whose hints alone keep the merge from admitting."""
    found: list[str] = []
    for i, answer in enumerate(answers):
        if not answer:
            continue
        rest = list(answers)
        rest[i] = None
        if admits(manager, rest):
            resources = [r for r, h in answer.items() if h is not None]
            label = names[i]
            if len(resources) > 1:
                culprits = []
                for r in resources:
                    rest[i] = {k: v for k, v in answer.items() if k != r}
                    if admits(manager, rest):
                        culprits.append(r)
                resources = culprits or resources
            found.append(f"{label}[{','.join(resources)}]" if resources and label != "cpu" else label)
    found.sort(key=lambda n: n.split("[")[0] in FIXED)
    return found


def with_preferences(result: MergeResult, names: Sequence[str], answers: Sequence[ResourceHints | None]) -> MergeResult:
    """A rejection says what each provider with a preference wanted."""
    wanted = []
    seen: dict[int, list[str]] = {}  # the memory provider hands one list to each of its resources
    for name, answer in zip(names, answers, strict=True):
        for resource, hints in (answer or {}).items():
            if hints is None:
                continue
            preferred = seen.get(id(hints))
            if preferred is None:
                preferred = seen[id(hints)] = _leading_preferred(hints)
            label = name if resource == name else f"{name} ({resource})"
            wanted.append(f"{label} prefers {' or '.join(preferred) or 'nothing it can satisfy'}")
    if not wanted or result.error is None:
        return result
    return replace(result, error=TopologyAffinityError(f"{result.error}; {'; '.join(wanted)}"))


def _leading_preferred(hints: Sequence[TopologyHint]) -> list[str]:
    """The first run of preferred hints starting among the first 256, at most 4 (all a message shows)."""
    if isinstance(hints, CPUTopologyHints) and hints.min_sockets is None:
        # (memory hints too: the same order, preferred by size alone)
        # Preferred means min_affinity nodes, and the list comes by size: a narrowest hint wider
        # than that means none is preferred (walking 256 hints to learn it cost more than the
        # merge); one that size means the run starts at the first hint.
        narrowest = hints.narrowest_count
        if narrowest is None or narrowest > hints.min_affinity:
            return []
        if narrowest == hints.min_affinity:
            return [format_mask(h.affinity)
                    for h in itertools.takewhile(lambda h: h.preferred, itertools.islice(hints, 4))]
    preferred: list[str] = []
    for seen, h in enumerate(hints):  # kubelet order: narrowest first, so preferred ones lead
        if (preferred and not h.preferred) or seen >= 256:
            break
        if h.preferred:
            preferred.append(format_mask(h.affinity))
            if len(preferred) == 4:
                break
    return preferred
