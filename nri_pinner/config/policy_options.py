"""The kubelet's policy-options table (``cpuManagerPolicyOptions`` / ``topologyManagerPolicyOptions``:
name = "value"), parsed as the kubelet parses it so a kubelet config can be pasted.

On/off options go through Go's ``strconv.ParseBool`` spellings; integer options through
``strconv.Atoi``. Error texts are the kubelet's (``bad value for option "x": strconv.ParseBool:
parsing "yes": invalid syntax``), so a search for the message finds the kubelet's docs too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
MIN_MAX_ALLOWABLE_NUMA_NODES = 8  # the kubelet refuses a lower max-allowable-numa-nodes


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # close to Go's strconv.Quote for these messages


def go_parse_bool(name: str, text: str) -> bool:
    if text in GO_TRUE:
        return True
    if text in GO_FALSE:
        return False
    raise ValueError(f'bad value for option "{name}": strconv.ParseBool: parsing {_quote(text)}: invalid syntax')


def go_atoi(name: str, text: str) -> int:
    digits = text[1:] if text[:1] in ("+", "-") else text
    prefix = f'unable to convert policy option to integer "{name}": strconv.Atoi: parsing {_quote(text)}'
    if not digits or not digits.isascii() or not digits.isdigit():
        raise ValueError(f"{prefix}: invalid syntax")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{prefix}: value out of range")
    return value


def parse_option_table(table: Mapping[str, object], allowed: tuple[str, ...], integers: tuple[str, ...] = ()
                       ) -> tuple[frozenset[str], dict[str, int]]:
    """(names switched on, integer options) from a name = "value" table; ``ValueError`` names the problem.

    Values are strings as in the kubelet's config; TOML booleans and integers are taken as
    their obvious spelling ("true", "8").
    """
    enabled: set[str] = set()
    numbers: dict[str, int] = {}
    for name, value in table.items():
        if name not in allowed and name not in integers:
            raise ValueError(f"unknown value {name!r}; known: {', '.join(allowed + integers)}")
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        elif isinstance(value, str):
            text = value
        else:
            raise ValueError(f"{name}: expected a string value, got {type(value).__name__} {value!r}")
        if name in integers:
            numbers[name] = go_atoi(name, text)
        elif go_parse_bool(name, text):
            enabled.add(name)
    return frozenset(enabled), numbers
