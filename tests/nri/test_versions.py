"""Runtime NRI version detection: announced, inferred from runtime name/version, or unknown."""

from __future__ import annotations

import pytest

from nri_pinner.nri import versions


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("v0.12.1", (0, 12, 1)),
        ("1.7.24~ds1", (1, 7, 24)),
        ("2.1.9+unknown", (2, 1, 9)),
        ("v2.2.0-225-ge9dc15b7a.m", (2, 2, 0)),
        ("v1.30", (1, 30, 0)),
        ("", None),
        ("(devel)", None),
        ("0.0.0-unknown", None),
        ("garbage", None),
    ],
)
def test_parse_version(text: str, parsed: versions.NriVersion | None) -> None:
    assert versions.parse_version(text) == parsed


@pytest.mark.parametrize(
    ("runtime", "version", "nri"),
    [
        ("containerd", "1.7.24~ds1", (0, 6, 1)),  # what Debian's containerd reports
        ("containerd", "v1.7.15", (0, 6, 0)),
        ("containerd", "v1.7.26", (0, 8, 0)),
        ("containerd", "v1.7.99", (0, 8, 0)),  # closest known release below
        ("containerd", "2.1.9+unknown", (0, 8, 0)),
        ("containerd", "v2.2.0", (0, 10, 0)),
        ("containerd", "v2.2.7", (0, 11, 0)),
        ("containerd", "v1.6.30", None),  # older than any NRI-capable release
        ("cri-o", "1.31.2", (0, 6, 1)),
        ("cri-o", "v1.34.0", (0, 10, 0)),
        ("podman", "5.0.0", None),
        ("containerd", "", None),
    ],
)
def test_infer_from_runtime(runtime: str, version: str, nri: versions.NriVersion | None) -> None:
    assert versions.infer_nri_version(runtime, version) == nri


def test_announced_version_wins_and_gates_features() -> None:
    nri, source = versions.runtime_nri_version("v0.12.1", "containerd", "1.7.24")
    assert (nri, source) == ((0, 12, 1), "announced")
    assert versions.safe_unsolicited_updates(nri)
    assert versions.valid_events(nri) == 0x3FFF
    nri, source = versions.runtime_nri_version("", "containerd", "v2.3.0")
    assert (nri, source) == ((0, 12, 0), "inferred")
    assert not versions.safe_unsolicited_updates(nri)  # the fix landed in v0.12.1
    assert versions.runtime_nri_version("", "mystery", "1.0") == (None, "unknown")
    assert versions.valid_events(None) == 0x7FF  # unknown: assume the oldest mask
    assert versions.valid_events((0, 9, 0)) == 0x7FF and versions.valid_events((0, 10, 0)) == 0x3FFF
    assert not versions.safe_unsolicited_updates(None)
    assert versions.format_version((0, 8, 0)) == "v0.8.0" and versions.format_version(None) == "unknown"
