"""Config problems: every error of a file at once, each with its key path and (from a TOML text) the
line and column, rendered like a compiler's ``file:line:col: key: reason``."""

from __future__ import annotations

import ast
import difflib
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Problem:
    source: str
    path: tuple[str, ...]  # ("cpu_manager", "reserved_cpus"); () for the file itself
    message: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}:{self.column or 1}"
        return f"{where}: {'.'.join(self.path)}: {self.message}" if self.path else f"{where}: {self.message}"

    def at(self, line: int | None, column: int | None) -> Problem:
        return replace(self, line=line, column=column)


class ConfigError(ValueError):
    """A config that cannot be used. ``problems`` lists every error found (one per line of the message),
    so an operator fixes a file in one round; a plain message is one problem without a key."""

    def __init__(self, message: str | Sequence[Problem]) -> None:
        if isinstance(message, str):
            self.problems: tuple[Problem, ...] = ()
            text = message
        else:
            self.problems = tuple(message)
            text = "\n".join(str(p) for p in self.problems)
        super().__init__(text)


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`; did you mean 'x'?` for a near miss (a typo, - for _), else ''."""
    candidates = sorted(known)
    normal = {c.replace("-", "_").lower(): c for c in candidates}
    if word.replace("-", "_").lower() in normal:
        return f"; did you mean {normal[word.replace('-', '_').lower()]!r}?"
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def syntax_problem(source: str, text: str, exc: tomllib.TOMLDecodeError) -> Problem:
    """A TOML syntax error as a Problem at its line and column (tomllib's words, our table names)."""
    found = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
    message = re.sub(r"\s*\((at line \d+, column \d+|at end of document)\)", "", str(exc))
    # tomllib names a table as a Python tuple, ('a', 'b'): name it as the file does, [a.b]
    message = re.sub(r"Cannot declare (\(.*\)) twice", lambda m: f"table {_table_name(m.group(1))} declared twice",
                     message)
    if found:
        return Problem(source, (), f"not valid TOML: {message}", int(found.group(1)), int(found.group(2)))
    lines = text.splitlines() or [""]  # "at end of document"
    return Problem(source, (), f"not valid TOML: {message} (at end of file)", len(lines), len(lines[-1]) + 1)


def _table_name(text: str) -> str:
    try:
        keys = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return "[" + ".".join(str(k) for k in keys) + "]" if isinstance(keys, tuple) else text
