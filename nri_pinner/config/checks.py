"""Value checks of single keys (settings.py asks them through `_Reader.get(..., check)`): each returns
the reason a value is refused, or None."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

# RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens, 253 characters at most.
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def seconds_problem(low: float, high: float) -> Callable[[float], str | None]:
    return lambda v: None if low <= v <= high else f"must be between {low:g} and {high:g}"


def off_or_seconds_problem(low: float, high: float) -> Callable[[float], str | None]:
    return lambda v: None if v == 0 or low <= v <= high else f"must be 0 (off) or between {low:g} and {high:g}"


def reserved_memory_problem(v: str) -> str | None:
    from ..engine.memorymanager.provider import parse_reserved_memory
    try:
        parse_reserved_memory(v)
    except ValueError as exc:
        return str(exc)
    return None


def plugin_name_problem(v: str) -> str | None:
    if not v or any(not (ch.isalnum() or ch in "_.+-") for ch in v):
        return f"must be non-empty and use only letters, digits and _.+- ; got {v!r}"
    return None


def metrics_address_problem(v: str) -> str | None:
    """metrics.address: an IPv4 or IPv6 address (0.0.0.0 / :: for every interface), or a host name
    (RFC 1123) — which must resolve on the host: `config --check` checks that there, `run` when it
    binds. Anything else is refused here, before the file is used."""
    if not v:
        return 'must not be empty: an IP address ("127.0.0.1", "::1"; "0.0.0.0" or "::" for every interface) ' \
               "or a host name"
    try:
        ipaddress.ip_address(v)
        return None
    except ValueError:
        pass
    if len(v) <= 253 and all(_LABEL.match(label) for label in v.removesuffix(".").split(".")) \
            and not v.replace(".", "").isdigit():
        return None
    return f"must be an IP address (IPv4 or IPv6, e.g. \"127.0.0.1\", \"::1\", \"0.0.0.0\") or a host name; got {v!r}"


def providers_problems(providers: tuple[str, ...], scope: str, pod_level_resource_managers: bool) -> list[str]:
    """hints.providers against the rest: the CPU provider is always on; the Memory Manager's part of
    pod scope with pod-level resource managers is not built (engine/pod_level_admission.py gives such
    a pod CPUs only), so asking for both is refused instead of leaving those pods without memory."""
    problems = [] if "cpu" in providers else ["the 'cpu' provider cannot be turned off"]
    if "memory" in providers and scope == "pod" and pod_level_resource_managers:
        problems.append("not implemented yet: the 'memory' provider with topology_manager.scope = \"pod\" and "
                        "pod_level_resource_managers = true (the Memory Manager's pod-level allocation is not "
                        "built); leave one of them out")
    return problems
