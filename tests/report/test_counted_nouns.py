"""A count's noun takes the count's number: ``1 retraction``, never ``1 retractions`` (issue 28, defect 14).

The lines a person reads that count retractions, preemptions, requests or questions go through
``kvdoctor.report.units.noun_for``; the verdict lines are checked here at the count of one, where the bug was.
"""

from __future__ import annotations

import pytest

from kvdoctor._exceptions import EXIT_PASS
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.pd import report as pd_report
from kvdoctor.pd.result import PdEvalResult, Score
from kvdoctor.report.units import noun_for


@pytest.mark.parametrize(
    ("count", "noun"),
    [(1, "retraction"), (0, "retractions"), (2, "retractions"), (None, "retractions"), ("?", "retractions")],
)
def test_the_noun_takes_the_counts_number(count: object, noun: str) -> None:
    assert noun_for(count, "retraction") == noun


def test_an_irregular_plural_and_a_flag_are_not_one() -> None:
    assert noun_for(1, "query", "queries") == "query" and noun_for(3, "query", "queries") == "queries"
    assert noun_for(True, "request") == "requests"  # a flag is no count of one


@pytest.mark.parametrize(("server", "noun"), [("sglang", "retraction"), ("vllm", "preemption")])
@pytest.mark.parametrize("count", [1, 7])
def test_consistencys_verdict_line_counts_in_the_right_number(server: str, noun: str, count: int) -> None:
    r = ConsistencyResult(
        "m",
        "dense",
        "single",
        "cpu",
        True,
        {},
        server=server,
        exit_code=EXIT_PASS,
        identical=16,
        total=16,
        wall_s=301.0,
        retractions={"reference": 0, "pressured": count},
    )
    word = noun if count == 1 else f"{noun}s"
    assert r.summary_line() == f"16/16 requests identical, {count} {word} (301 s)"


@pytest.mark.parametrize("count", [1, 3])
def test_pd_evals_verdict_line_counts_in_the_right_number(count: int) -> None:
    r = PdEvalResult("m", "generic", 0.8, 5, count, "x", "data-path")
    r.exit_code, r.exit_reason = EXIT_PASS, "passed"
    r.retractions, r.score = count, Score(1.0, 0.0, count, 10, 1.0)
    s = "" if count == 1 else "s"
    assert pd_report.verdict_detail(r) == f"accuracy 1.000 ≥ 0.800, {count} retraction{s}, {count} question{s}"
