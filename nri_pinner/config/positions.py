"""Where each key of a TOML text is (tomllib keeps no positions): ``{("cpu_manager", "reserved_cpus"):
(line, column)}``, 1-based. A line scanner, not a parser: it runs only on text tomllib has accepted,
follows [table] / [[array]] headers, dotted and quoted keys and the keys of one-line inline tables, and
skips multi-line strings and arrays."""

from __future__ import annotations

import re

Position = tuple[int, int]
_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _key(text: str, i: int) -> tuple[list[str], int]:
    """A dotted key starting at text[i]; returns its parts and the index after it."""
    parts: list[str] = []
    while i < len(text):
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] in "\"'":
            quote = text[i]
            end = i + 1
            while end < len(text) and text[end] != quote:
                end += 2 if quote == '"' and text[end] == "\\" else 1
            parts.append(text[i + 1 : end].encode().decode("unicode_escape") if quote == '"' else text[i + 1 : end])
            i = end + 1
        else:
            m = _BARE.match(text, i)
            if not m:
                break
            parts.append(m.group())
            i = m.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == ".":
            i += 1
            continue
        break
    return parts, i


def _value_end(lines: list[str], n: int, i: int, out: dict[tuple[str, ...], Position],
               prefix: tuple[str, ...]) -> tuple[int, int]:
    """Skip the value that starts at lines[n][i]; record the keys of inline tables on the way.
    Returns the (line index, column) just after the value."""
    depth: list[str] = []
    expect_key = False
    while n < len(lines):
        text = lines[n]
        while i < len(text):
            ch = text[i]
            if expect_key and ch not in " \t,":
                parts, j = _key(text, i)
                if parts and j < len(text) and text[j] == "=":
                    out.setdefault((*prefix, *parts), (n + 1, i + 1))
                    i = j + 1
                expect_key = False
                continue
            if text.startswith(('"""', "'''"), i):
                quote, i = text[i : i + 3], i + 3
                while True:
                    end = text.find(quote, i)
                    if end >= 0:
                        i = end + 3
                        break
                    n, i = n + 1, 0
                    if n >= len(lines):
                        return n, 0
                    text = lines[n]
                continue
            if ch in "\"'":
                end = i + 1
                while end < len(text) and text[end] != ch:
                    end += 2 if ch == '"' and text[end] == "\\" else 1
                i = end + 1
            elif ch in "[{":
                depth.append(ch)
                expect_key = ch == "{" and len(depth) == 1
                i += 1
            elif ch in "]}":
                depth.pop() if depth else None
                i += 1
                if not depth:
                    return n, i
            elif ch == "," and depth == ["{"]:
                expect_key, i = True, i + 1
            elif ch == "#":
                break
            else:
                i += 1
        if not depth:
            return n, len(text)
        n, i = n + 1, 0
    return n, 0


def key_positions(text: str) -> dict[tuple[str, ...], Position]:
    lines = text.splitlines()
    out: dict[tuple[str, ...], Position] = {}
    table: tuple[str, ...] = ()
    n = 0
    while n < len(lines):
        line = lines[n]
        stripped = line.lstrip()
        col = len(line) - len(stripped)
        if stripped.startswith("["):
            double = stripped.startswith("[[")
            parts, _ = _key(stripped, 2 if double else 1)
            table = tuple(parts)
            out.setdefault(table, (n + 1, col + 1))
            n += 1
            continue
        if not stripped or stripped.startswith("#"):
            n += 1
            continue
        parts, i = _key(line, col)
        if parts and i < len(line) and line[i] == "=":
            out.setdefault((*table, *parts), (n + 1, col + 1))
            n, _ = _value_end(lines, n, i + 1, out, (*table, *parts))
        n += 1
    return out


def locate(positions: dict[tuple[str, ...], Position], path: tuple[str, ...]) -> Position | None:
    """The key's own position, else its nearest enclosing table's (a key inside an inline table)."""
    for end in range(len(path), 0, -1):
        if path[:end] in positions:
            return positions[path[:end]]
    return None
