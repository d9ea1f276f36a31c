"""CPUSet: the kernel list syntax both ways, and set algebra checked against Python sets."""
# mypy: disable-error-code="untyped-decorator"
# (hypothesis is imported untyped by the project mypy config)

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_pinner.engine.cpuset import EMPTY, MAX_CPUS, CPUSet, CPUSetError

cpu_ids = st.sets(st.integers(min_value=0, max_value=1100), max_size=80)
SETTINGS = settings(max_examples=200, deadline=None)


def kernel_list(cpus: set[int]) -> str:
    """Reference printer: maximal runs of consecutive ids, ascending."""
    runs: list[tuple[int, int]] = []
    for c in sorted(cpus):
        if runs and runs[-1][1] == c - 1:
            runs[-1] = (runs[-1][0], c)
        else:
            runs.append((c, c))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@pytest.mark.parametrize(
    ("text", "cpus", "canonical"),
    [
        ("", set(), ""),
        ("  \n", set(), ""),
        ("0", {0}, "0"),
        ("0-3,8", {0, 1, 2, 3, 8}, "0-3,8"),
        ("0-3,8\n", {0, 1, 2, 3, 8}, "0-3,8"),  # sysfs files end in a newline
        (" 2 , 0-1 ", {0, 1, 2}, "0-2"),
        ("5,3,4", {3, 4, 5}, "3-5"),
        ("0-3,2-5", set(range(6)), "0-5"),
        ("7-7", {7}, "7"),
        ("0,2,4,6", {0, 2, 4, 6}, "0,2,4,6"),
        ("1023", {1023}, "1023"),
    ],
)
def test_parse_and_print(text: str, cpus: set[int], canonical: str) -> None:
    parsed = CPUSet.parse(text)
    assert set(parsed) == cpus
    assert str(parsed) == canonical


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("3-1", ["'3-1'", "ends before it starts"]),
        ("a", ["'a'"]),
        ("0,a-2", ["'a'", "'a-2'"]),
        ("1,,2", ["empty element", "'1,,2'"]),
        ("1,", ["empty element"]),
        ("-1", ["'-1'", "negative"]),
        ("1-", ["''", "'1-'"]),
        ("1.5", ["'1.5'"]),
        ("0-3,+4", ["'+4'"]),
        ("2--3", ["'-3'"]),
    ],
)
def test_parse_errors_name_the_bad_token(text: str, names: list[str]) -> None:
    with pytest.raises(CPUSetError) as err:
        CPUSet.parse(text)
    for name in names:
        assert name in str(err.value)
    assert isinstance(err.value, ValueError)


def test_constructor_and_mask_reject_negatives() -> None:
    with pytest.raises(CPUSetError, match="-2"):
        CPUSet([1, -2])
    with pytest.raises(CPUSetError):
        CPUSet.from_mask(-1)


@SETTINGS
@given(cpu_ids)
def test_print_then_parse_round_trips(cpus: set[int]) -> None:
    s = CPUSet(cpus)
    assert str(s) == kernel_list(cpus)
    assert CPUSet.parse(str(s)) == s
    assert list(s) == sorted(cpus)
    assert s.sorted() == sorted(cpus)
    assert len(s) == len(cpus)
    assert bool(s) == bool(cpus)
    assert CPUSet.from_mask(s.mask) == s
    assert s.mask == sum(1 << c for c in cpus)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)), max_size=12))
def test_parse_of_arbitrary_ranges(ranges: list[tuple[int, int]]) -> None:
    text = ",".join(f"{lo}-{lo + width}" if width else str(lo) for lo, width in ranges)
    expected = {c for lo, width in ranges for c in range(lo, lo + width + 1)}
    assert set(CPUSet.parse(text)) == expected


@SETTINGS
@given(cpu_ids, cpu_ids)
def test_algebra_matches_python_sets(a: set[int], b: set[int]) -> None:
    sa, sb = CPUSet(a), CPUSet(b)
    assert set(sa | sb) == a | b
    assert set(sa & sb) == a & b
    assert set(sa - sb) == a - b
    assert set(sa ^ sb) == a ^ b
    assert sa.union(sb) == sa | sb
    assert sa.intersection(sb) == sa & sb
    assert sa.difference(sb) == sa - sb
    assert sa.issubset(sb) == a.issubset(b)
    assert sa.isdisjoint(sb) == a.isdisjoint(b)
    assert (sa == sb) == (a == b)
    if a == b:
        assert hash(sa) == hash(sb)
    for c in a | b | {0, 5000}:
        assert (c in sa) == (c in a)
    if a:
        assert sa.min() == min(a)


def test_membership_of_non_ints_and_negatives() -> None:
    s = CPUSet.parse("0-3")
    assert "1" not in s
    assert -1 not in s
    assert 1.0 not in s


def test_empty_set_facts() -> None:
    assert CPUSet.parse("") is EMPTY
    assert CPUSet() == EMPTY
    assert str(EMPTY) == ""
    assert len(EMPTY) == 0
    assert not EMPTY
    with pytest.raises(ValueError, match="empty"):
        EMPTY.min()


def test_repr_shows_the_list() -> None:
    assert repr(CPUSet.parse("0-2,9")) == "CPUSet('0-2,9')"


def test_not_equal_to_other_types() -> None:
    assert CPUSet([1]) != {1}
    assert CPUSet([1]) != 2


# -- bounds (issue 20, defect 2): no CPU id from input reaches the kernel's NR_CPUS ceiling ------------

@pytest.mark.parametrize("text", ["0-999999999", "99999999999", "8192", "0-8192", "9" * 5000,
                                  "\u00b2", "1-\u00b2", "0,\u0663"])
def test_parse_refuses_out_of_range_and_non_ascii_ids_fast(text: str) -> None:
    started = time.perf_counter()
    with pytest.raises(CPUSetError) as failed:
        CPUSet.parse(text)
    assert time.perf_counter() - started < 0.05  # refused before any mask is built
    assert ("out of range" in str(failed.value)) or ("bad CPU id" in str(failed.value))
    assert len(str(failed.value)) < 300  # a 5000-digit id is quoted cut short


def test_largest_cpu_id_is_accepted() -> None:
    assert CPUSet.parse("8191") == CPUSet([MAX_CPUS - 1])
    assert len(CPUSet.parse(f"0-{MAX_CPUS - 1}")) == MAX_CPUS


def test_constructor_and_mask_refuse_ids_at_the_ceiling() -> None:
    with pytest.raises(CPUSetError, match="out of range"):
        CPUSet([MAX_CPUS])
    with pytest.raises(CPUSetError, match="above"):
        CPUSet.from_mask(1 << MAX_CPUS)
