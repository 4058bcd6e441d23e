"""A red configuration minimized to exactly the flags that make it red, and bisected to its first red release."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdoctor.sweep.minimize import ddmin, first_red

FLAGS = ("--a", "--b", "--c", "--d", "--e", "--f", "--g")


def test_a_fault_where_two_flags_meet_is_minimized_to_those_two() -> None:
    calls: list[tuple[str, ...]] = []

    def red(subset: tuple[str, ...]) -> bool:
        calls.append(subset)
        return {"--b", "--f"} <= set(subset)

    found = ddmin(FLAGS, red)
    assert found.kept == ("--b", "--f")
    assert len(calls) == len(set(calls))  # each probe run once
    assert dict(found.probes)[FLAGS] is True


def test_one_flag_alone() -> None:
    assert ddmin(FLAGS, lambda s: "--d" in s).kept == ("--d",)


def test_red_at_the_defaults_keeps_nothing() -> None:
    assert ddmin(FLAGS, lambda s: True).kept == ()


@settings(max_examples=60, deadline=None)
@given(st.sets(st.sampled_from(FLAGS), min_size=1, max_size=4))
def test_the_result_is_red_and_one_minimal(cause: set[str]) -> None:
    def red(subset: tuple[str, ...]) -> bool:
        return cause <= set(subset)

    kept = ddmin(FLAGS, red).kept
    assert red(kept)
    assert all(not red(tuple(set(kept) - {k})) for k in kept)  # 1-minimal
    assert set(kept) == cause


def test_either_of_two_causes_gives_one_of_them() -> None:
    kept = ddmin(FLAGS, lambda s: {"--a", "--c"} <= set(s) or "--g" in s).kept
    assert kept in (("--g",), ("--a", "--c"))


RELEASES = ("0.5.20", "0.5.21", "0.5.22", "0.5.23")


@pytest.mark.parametrize("first", range(len(RELEASES)))
def test_bisection_finds_the_first_red_release(first: int) -> None:
    probed: list[str] = []

    def red(release: str) -> bool:
        probed.append(release)
        return RELEASES.index(release) >= first

    found = first_red(RELEASES, red)
    assert found.first_red == RELEASES[first]
    assert found.red_in_oldest == (first == 0)
    assert len(probed) == len(set(probed)) <= 2 + (len(RELEASES) - 2).bit_length()  # both ends, then halving
    expected = "red in every driven release from 0.5.20" if first == 0 else f"red from {RELEASES[first]}"
    assert found.says(RELEASES).startswith(expected)


def test_green_in_the_newest_says_so() -> None:
    found = first_red(RELEASES, lambda r: False)
    assert found.first_red is None and found.says(RELEASES).startswith("green in every release tried")


def test_every_pair_subset_cause_over_three_flags() -> None:
    for cause in combinations(FLAGS[:3], 2):
        assert ddmin(FLAGS[:3], lambda s, c=cause: set(c) <= set(s)).kept == cause
