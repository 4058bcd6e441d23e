"""Token-by-token comparison and the noise floor (pure logic, no server)."""

from __future__ import annotations

from kvdoctor.consistency.compare import Generation, against, compare, diff, median_distinct, noise_floor


def gen(
    tokens: list[int], logprobs: list[float] | None = None, margins: list[float | None] | None = None
) -> Generation:
    lp = logprobs if logprobs is not None else [-1.0] * len(tokens)
    mg = margins if margins is not None else [0.5] * len(tokens)
    return Generation(tuple(tokens), tuple(lp), tuple(mg))


def test_identical_requests_have_no_divergence_and_report_the_logprob_delta() -> None:
    d = diff(0, gen([5, 6, 7], [-1.0, -2.0, -3.0]), gen([5, 6, 7], [-1.0, -2.25, -3.0]))
    assert not d.diverged and d.identical_prefix == 3 and d.position is None
    assert d.max_abs_dlogprob == 0.25


def test_first_divergence_names_position_both_tokens_and_the_reference_margin() -> None:
    d = diff(3, gen([5, 6, 7, 8], margins=[0.1, 0.2, 0.03, 0.4]), gen([5, 6, 9, 8]))
    assert d.diverged and d.index == 3
    assert (d.identical_prefix, d.position, d.ref_token, d.got_token, d.ref_margin) == (2, 2, 7, 9, 0.03)


def test_a_run_that_ends_early_diverges_where_it_ended() -> None:
    d = diff(0, gen([5, 6, 7]), gen([5, 6]))
    assert d.diverged and d.position == 2 and d.ref_token == 7 and d.got_token is None
    d = diff(0, gen([5]), gen([5, 6]))
    assert d.diverged and d.position == 1 and d.ref_token is None and d.got_token == 6


def test_noise_floor_excuses_only_at_or_after_the_references_own_divergence() -> None:
    ref = [gen([1, 2, 3, 4]), gen([1, 2, 3, 4])]
    repeat = [gen([1, 2, 9, 9]), gen([1, 2, 3, 4])]  # request 0 already disagrees with itself at 2
    floor = noise_floor(ref, repeat)
    assert floor.diverged == {0: 2} and floor.count == 1
    late = against(ref, [gen([1, 2, 3, 7]), gen([1, 2, 3, 4])], floor)
    assert late[0].diverged and late[0].within_noise
    early = against(ref, [gen([1, 8, 3, 4]), gen([1, 2, 3, 4])], floor)
    assert early[0].diverged and not early[0].within_noise  # before the noise: a real divergence
    other = against(ref, [gen([1, 2, 3, 4]), gen([1, 2, 3, 0])], floor)
    assert other[1].diverged and not other[1].within_noise  # a reproducible request is never excused


def test_compare_refuses_runs_of_different_sizes() -> None:
    try:
        compare([gen([1])], [])
    except ValueError as exc:
        assert "different sizes" in str(exc)
    else:
        raise AssertionError("compare accepted runs of different sizes")


def test_median_distinct_sees_a_two_token_cycle() -> None:
    assert median_distinct([gen([930, 251] * 16), gen([930, 251] * 16), gen(list(range(32)))]) == 2


def test_drift_names_the_earliest_token_whose_logprob_passes_the_threshold() -> None:
    """Identical tokens, logprobs moved: where the state first showed is the earliest drifting token (then the
    lowest request), not the largest delta; below the threshold nothing is named."""
    from kvdoctor.consistency.compare import drift

    ref = [gen([5, 6, 7, 8], [-1.0, -1.0, -1.0, -1.0]), gen([5, 6, 7, 8], [-1.0, -1.0, -1.0, -1.0])]
    got = [gen([5, 6, 7, 8], [-1.0, -1.0, -1.0, -1.5]), gen([5, 6, 7, 8], [-1.0, -1.0, -1.01, -1.0])]
    floor = noise_floor(ref, ref)
    out = drift(compare(ref, got), floor)
    assert out["requests"] == [0, 1]
    assert out["first"] == {"request": 1, "position": 2, "dlogprob": abs(-1.01 + 1.0)}
    assert "first" not in drift(compare(ref, ref), floor)
