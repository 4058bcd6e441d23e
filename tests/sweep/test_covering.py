"""The sweep's plan: every t-tuple of values met, the defaults first, the same plan every time, shards that add up."""

from __future__ import annotations

from itertools import combinations, product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdoctor._exceptions import InputError
from kvdoctor.sweep.covering import coverage, plan, shard
from kvdoctor.sweep.space import Factor, Space

SPACE = Space(
    "sglang",
    (
        Factor("--disable-overlap-schedule", (False, True), False),
        Factor("--page-size", (1, 16, 64), 1),
        Factor("--chunked-prefill-size", (-1, 512), 8192),
        Factor("--disable-radix-cache", (False, True), False),
        Factor("--disaggregation-decode-retraction-backup", ("cpu_tensor", "host_pool"), "cpu_tensor", topology="pd"),
        Factor("--schedule-policy", ("fcfs", "lpm"), "fcfs"),
    ),
)


def _met(space: Space, cells, t: int) -> set:  # every t-tuple of (flag, value) some cell holds
    return {c for cell in cells for c in combinations([(f.flag, cell.get(f.flag)) for f in space.factors], t)}


def _every(space: Space, t: int) -> set:
    return {
        combo
        for group in combinations(space.factors, t)
        for combo in product(*[[(f.flag, v) for v in dict.fromkeys((*f.values, f.default))] for f in group])
    }


@pytest.mark.parametrize("t", [1, 2, 3])
def test_every_t_tuple_of_values_meets_in_some_configuration(t: int) -> None:
    cells = plan(SPACE, t)
    assert _every(SPACE, t) <= _met(SPACE, cells, t)
    assert coverage(SPACE, cells, t).fraction == 1.0
    full = 1
    for f in SPACE.factors:
        full *= len(set((*f.values, f.default)))
    assert len(cells) < full  # a covering array, not the product


def test_the_defaults_come_first_and_the_plan_is_the_same_every_time() -> None:
    cells = plan(SPACE)
    assert cells[0] == SPACE.defaults() and cells[0].argv(SPACE) == () and cells[0].label(SPACE) == "defaults"
    assert plan(SPACE) == cells
    assert len(set(cells)) == len(cells)


def test_a_default_outside_the_tried_values_is_tried_too() -> None:
    cells = plan(SPACE)
    assert {c.get("--chunked-prefill-size") for c in cells} == {-1, 512, 8192}


def test_a_strength_above_the_factor_count_is_the_full_product() -> None:
    small = Space("sglang", SPACE.factors[:2])
    assert len(plan(small, 3)) == 2 * 3


def test_a_budget_that_ran_part_of_the_plan_reports_what_it_covered() -> None:
    cells = plan(SPACE)
    part = coverage(SPACE, cells[:2], 2)
    assert 0 < part.covered < part.total == len(_every(SPACE, 2))
    assert part.covered == len(_every(SPACE, 2) & _met(SPACE, cells[:2], 2))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(2, 4), min_size=2, max_size=6), st.integers(1, 3))
def test_pairs_are_covered_for_any_space(sizes: list[int], strength: int) -> None:
    space = Space("x", tuple(Factor(f"--f{i}", tuple(range(n)), 0) for i, n in enumerate(sizes)))
    cells = plan(space, strength)
    t = min(strength, len(sizes))
    assert _every(space, t) <= _met(space, cells, t)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shards_are_disjoint_and_add_up_to_the_plan(n: int) -> None:
    cells = plan(SPACE)
    shares = [shard(cells, f"{i}/{n}") for i in range(1, n + 1)]
    indices = sorted(k for share in shares for k, _ in share)
    assert indices == list(range(len(cells)))
    assert all(cells[k] == cell for share in shares for k, cell in share)


@pytest.mark.parametrize("spec", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2", ""])
def test_a_malformed_shard_is_refused(spec: str) -> None:
    with pytest.raises(InputError, match="--shard"):
        shard(plan(SPACE), spec)


def test_a_strength_below_one_is_refused() -> None:
    with pytest.raises(InputError, match="--strength 0"):
        plan(SPACE, 0)
