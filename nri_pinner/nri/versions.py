"""Which NRI protocol version a runtime speaks, and what that allows.

A runtime announces its NRI version in ``ConfigureRequest.NRI_version`` only from NRI v0.12. For older
runtimes the version is inferred from ``runtime_name``/``runtime_version`` with a table that restates
containerd/nri ``pkg/api/version.go`` (``runtimeVersionMap``): each entry is the first runtime release
that vendors a given NRI module; a runtime version maps to the closest entry at or below it.
"""

from __future__ import annotations

import re
from typing import Final

NriVersion = tuple[int, int, int]

# Event mask bits valid on a runtime (pkg/api/event.go ValidEvents): events 1..11 up to v0.9,
# 1..14 from v0.10. Any other bit makes the runtime's Configure fail ("invalid plugin events").
VALID_EVENTS_V0_2: Final = 0x7FF
VALID_EVENTS_V0_10: Final = 0x3FFF

FIRST_WIDE_EVENT_MASK: Final[NriVersion] = (0, 10, 0)
# containerd/nri 55afaa2 (v0.12.1) fixed the lock-order inversion that can deadlock the runtime when
# a plugin sends UpdateContainers while an event is in flight.
FIRST_SAFE_UNSOLICITED_UPDATES: Final[NriVersion] = (0, 12, 1)

# Values a Go runtime/stub sends when it does not know its own version.
_UNKNOWN_MARKERS: Final = frozenset({"", "(devel)", "0.0.0-unknown", "v0.0.0-unknown", "unknown"})

_VERSION_RE: Final = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")

# (first runtime release, NRI version it vendors), ascending per runtime.
_RUNTIME_TABLE: Final[dict[str, tuple[tuple[NriVersion, NriVersion], ...]]] = {
    "containerd": (
        ((1, 7, 0), (0, 3, 0)),
        ((1, 7, 7), (0, 4, 0)),
        ((1, 7, 14), (0, 6, 0)),
        ((1, 7, 16), (0, 6, 1)),
        ((1, 7, 26), (0, 8, 0)),
        ((2, 0, 0), (0, 8, 0)),
        ((2, 2, 0), (0, 10, 0)),
        ((2, 2, 1), (0, 11, 0)),
        # Not in upstream's map (2.3 announces NRI_version itself); from containerd v2.3.0 go.mod.
        ((2, 3, 0), (0, 12, 0)),
    ),
    "cri-o": (
        ((1, 26, 0), (0, 2, 0)),
        ((1, 26, 2), (0, 3, 0)),
        ((1, 29, 0), (0, 5, 0)),
        ((1, 29, 2), (0, 6, 0)),
        ((1, 31, 0), (0, 6, 1)),
        ((1, 32, 0), (0, 9, 0)),
        ((1, 33, 0), (0, 9, 1)),
        ((1, 34, 0), (0, 10, 0)),
        ((1, 35, 0), (0, 11, 0)),
    ),
}


def parse_version(text: str) -> NriVersion | None:
    """Leading ``[v]MAJOR.MINOR[.PATCH]`` of a version string; None if absent or an unknown marker.

    Distribution and build suffixes are ignored: ``1.7.24~ds1``, ``2.1.9+unknown`` and
    ``v2.2.0-225-ge9dc15b7a.m`` parse as (1, 7, 24), (2, 1, 9) and (2, 2, 0).
    """
    text = text.strip()
    if text in _UNKNOWN_MARKERS:
        return None
    match = _VERSION_RE.match(text)
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def infer_nri_version(runtime_name: str, runtime_version: str) -> NriVersion | None:
    """NRI version vendored by a runtime release, or None for an unknown runtime or version."""
    table = _RUNTIME_TABLE.get(runtime_name.strip().lower())
    version = parse_version(runtime_version)
    if table is None or version is None:
        return None
    found: NriVersion | None = None
    for first_release, nri in table:
        if first_release > version:
            break
        found = nri
    return found


def runtime_nri_version(
    announced: str, runtime_name: str, runtime_version: str
) -> tuple[NriVersion | None, str]:
    """Runtime's NRI version and where it came from: ``announced``, ``inferred`` or ``unknown``."""
    version = parse_version(announced)
    if version is not None:
        return version, "announced"
    version = infer_nri_version(runtime_name, runtime_version)
    if version is not None:
        return version, "inferred"
    return None, "unknown"


def valid_events(nri: NriVersion | None) -> int:
    """Event bits the runtime accepts; an unknown version is treated as the oldest (safe) one."""
    if nri is not None and nri >= FIRST_WIDE_EVENT_MASK:
        return VALID_EVENTS_V0_10
    return VALID_EVENTS_V0_2


def safe_unsolicited_updates(nri: NriVersion | None) -> bool:
    """True only when the runtime has the UpdateContainers deadlock fix (NRI >= v0.12.1)."""
    return nri is not None and nri >= FIRST_SAFE_UNSOLICITED_UPDATES


def format_version(nri: NriVersion | None) -> str:
    return "unknown" if nri is None else "v{}.{}.{}".format(*nri)
