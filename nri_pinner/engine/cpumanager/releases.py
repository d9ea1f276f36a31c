"""Which kubelet release each allocator rule follows, and the fixes merged after the newest one.

The allocator follows the newest release we target (``DEFAULT_RELEASE``) unless a config asks
for an older one (``cpu_manager.kubelet_version``): a node whose kubelet ran the static policy of
that release keeps getting the same placements for the same state. A rule here is a change of
placement between releases; releases that changed no placement (1.33, 1.35, 1.36 for the
allocator) behave as the release before them.

Fixes merged upstream after the newest release are not followed by default: each is named by its
pull request in ``POST_RELEASE_FIXES`` and, until it is built, a config that asks for it is refused
("not implemented"), never accepted and ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

KUBELET_RELEASES = ("1.32", "1.33", "1.34", "1.35", "1.36")
DEFAULT_RELEASE = "1.36"


@dataclass(frozen=True)
class AllocatorRule:
    name: str
    since: str  # the first kubelet release that follows it
    pr: int  # kubernetes/kubernetes pull request
    summary: str


# Placements that changed between the releases we target, oldest first.
PARTIAL_UNCORE_ODD_SMT = AllocatorRule(
    "partial-uncore-odd-smt", "1.34", 131850,
    "prefer-align-cpus-by-uncorecache takes a partial uncore cache for any count on SMT: "
    "ceil(needed / threads) cores of the cache, less their highest CPU when an odd count leaves "
    "one over (v1.32: needed // threads cores, so an odd count never fitted a partial cache)",
)
RULES = (PARTIAL_UNCORE_ODD_SMT,)

# Merged after the newest release we target: name -> what it changes. None is built yet.
POST_RELEASE_FIXES: dict[str, str] = {
    "kubernetes#139456": "distribute-cpus-across-numa spreads a container over at least as many NUMA "
                         "nodes as the Topology Manager's hint holds, when that many can balance it",
    "kubernetes#140498": "the whole-core step skips cores with a busy thread on machines whose cores "
                         "have different thread counts, as hybrid P/E-core machines",
}


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def check_release(release: str) -> str:
    """``release`` if the allocator can follow it, else ``ValueError`` naming the ones it can."""
    if release not in KUBELET_RELEASES:
        raise ValueError(f"kubelet release {release!r} is not one the allocator follows; "
                         f"known: {', '.join(KUBELET_RELEASES)}")
    return release


def release_of(text: str) -> str:
    """The release a version names: "1.32", "v1.32" and "1.32.10" all name 1.32 (patch releases change
    no placement). ``ValueError`` when it is none the allocator follows."""
    parts = text.strip().removeprefix("v").split(".")
    if len(parts) not in (2, 3) or not all(p.isascii() and p.isdigit() for p in parts):
        raise ValueError(f"{text!r} is not a kubelet version (write \"1.32\", \"v1.32\" or \"1.32.10\")")
    return check_release(f"{int(parts[0])}.{int(parts[1])}")


def release_problem(text: str) -> str | None:
    """Why ``text`` names no release the allocator follows (a config value check), or None."""
    try:
        release_of(text)
    except ValueError as exc:
        return str(exc)
    return None


def follows(release: str, rule: AllocatorRule) -> bool:
    """True when the kubelet of ``release`` places CPUs by ``rule``."""
    return _key(check_release(release)) >= _key(rule.since)
