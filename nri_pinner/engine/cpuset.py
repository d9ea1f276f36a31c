"""Immutable CPU sets in the Linux list syntax (``0-3,8,10-11``).

Backed by an int bitmask: set algebra on 1024 CPUs is a handful of machine
words, which is what keeps allocation decisions well under a millisecond.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

# The kernel's largest NR_CPUS (CONFIG_NR_CPUS_RANGE_END): no CPU id read from input can reach it.
# Bounding ids keeps a hostile "0-999999999" from costing seconds and a gigabyte of mask.
MAX_CPUS = 8192


class CPUSetError(ValueError):
    """A CPU list string that does not follow the kernel's list syntax, or an id >= MAX_CPUS."""


class CPUSet:
    __slots__ = ("_mask",)

    def __init__(self, cpus: Iterable[int] = ()) -> None:
        mask = 0
        for cpu in cpus:
            if cpu < 0:
                raise CPUSetError(f"negative CPU id {cpu}")
            if cpu >= MAX_CPUS:
                raise CPUSetError(f"CPU id {cpu} out of range (limit {MAX_CPUS - 1})")
            mask |= 1 << cpu
        self._mask = mask

    @classmethod
    def from_mask(cls, mask: int) -> CPUSet:
        if mask < 0:
            raise CPUSetError("negative mask")
        if mask >> MAX_CPUS:
            raise CPUSetError(f"mask names a CPU id above {MAX_CPUS - 1}")
        return _of(mask)

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Parse ``0-3,8``; the empty string (or only whitespace) is the empty set."""
        text = text.strip()
        if not text:
            return EMPTY
        mask = 0
        for token in text.split(","):
            token = token.strip()
            if not token:
                raise CPUSetError(f"empty element in CPU list {text!r}")
            lo_s, sep, hi_s = token.partition("-")
            if sep and not lo_s:
                raise CPUSetError(f"negative CPU id in {token!r} (CPU list {text!r})")
            lo = _parse_id(lo_s, token, text)
            hi = _parse_id(hi_s, token, text) if sep else lo
            if hi < lo:
                raise CPUSetError(f"range {token!r} ends before it starts (CPU list {text!r})")
            mask |= ((1 << (hi - lo + 1)) - 1) << lo
        return _of(mask)

    # -- queries -----------------------------------------------------------
    @property
    def mask(self) -> int:
        return self._mask

    def __len__(self) -> int:
        return self._mask.bit_count()

    def __bool__(self) -> bool:
        return self._mask != 0

    def __iter__(self) -> Iterator[int]:
        m = self._mask
        while m:
            low = m & -m
            yield low.bit_length() - 1
            m ^= low

    def __contains__(self, cpu: object) -> bool:
        return isinstance(cpu, int) and cpu >= 0 and bool(self._mask >> cpu & 1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUSet) and other._mask == self._mask

    def __hash__(self) -> int:
        return hash(self._mask)

    def sorted(self) -> list[int]:
        return list(self)

    def min(self) -> int:
        if not self._mask:
            raise ValueError("min() of an empty CPU set")
        return (self._mask & -self._mask).bit_length() - 1

    # -- algebra -----------------------------------------------------------
    def __or__(self, other: CPUSet) -> CPUSet:
        return _of(self._mask | other._mask)

    def __and__(self, other: CPUSet) -> CPUSet:
        return _of(self._mask & other._mask)

    def __sub__(self, other: CPUSet) -> CPUSet:
        return _of(self._mask & ~other._mask)

    def __xor__(self, other: CPUSet) -> CPUSet:
        return _of(self._mask ^ other._mask)

    union = __or__
    intersection = __and__
    difference = __sub__

    def issubset(self, other: CPUSet) -> bool:
        return self._mask & ~other._mask == 0

    def isdisjoint(self, other: CPUSet) -> bool:
        return self._mask & other._mask == 0

    # -- printing ----------------------------------------------------------
    def __str__(self) -> str:
        parts: list[str] = []
        m = self._mask
        while m:  # one step per run of consecutive CPUs, not per CPU (a 256-CPU pool is one or two runs)
            lo = (m & -m).bit_length() - 1
            above = m >> lo
            run = (~above & (above + 1)).bit_length() - 1  # how many ones from `lo` up
            parts.append(_fmt(lo, lo + run - 1))
            m &= ~(((1 << run) - 1) << lo)
        return ",".join(parts)

    def __repr__(self) -> str:
        return f"CPUSet({str(self)!r})"


def _fmt(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _parse_id(s: str, token: str, text: str) -> int:
    s = s.strip()
    # isdigit() alone accepts "²" and other digits int() refuses; ASCII only
    if not (s.isascii() and s.isdigit()):  # rejects "", "a", "-1", "+1", "1.5", "²"
        raise CPUSetError(f"bad CPU id {s[:20]!r} in {_cut(token)!r} (CPU list {_cut(text)!r})")
    if len(s) > 5 or int(s) >= MAX_CPUS:  # checked before any mask is built
        raise CPUSetError(f"CPU id {_cut(s)} out of range (limit {MAX_CPUS - 1}) in CPU list {_cut(text)!r}")
    return int(s)


def _cut(text: str, limit: int = 60) -> str:
    """Hostile input can be megabytes long: errors quote its start."""
    return text if len(text) <= limit else text[:limit] + "..."


def _of(mask: int) -> CPUSet:
    """A set from a mask already known to be in range (algebra on valid sets)."""
    s = CPUSet.__new__(CPUSet)
    s._mask = mask
    return s


EMPTY = _of(0)
