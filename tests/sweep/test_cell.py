"""A cell's verdict is read from its run's gates: green only with the path proven, a fault that did not fire in this
configuration leaves it green, a check without teeth is vacuous, a death after serving is loud, before it refused."""

from __future__ import annotations

from dataclasses import replace

from kvdoctor._exceptions import EXIT_INTERNAL
from kvdoctor.consistency.gates import Gate
from kvdoctor.consistency.result import settled
from kvdoctor.sweep.cell import Verdict, classify
from tests.sweep.runs import died, result


def test_green_needs_the_proof_gate_passed() -> None:
    assert classify(result(), "preempt").verdict is Verdict.GREEN
    no_retraction = classify(result(retractions=0), "preempt")
    assert no_retraction.verdict is Verdict.VACUOUS and "retracted 0" in no_retraction.reason


def test_a_green_run_without_its_scenarios_proof_gate_is_vacuous() -> None:
    """prefix-cache's proof is its prefix-cache gate: a run holding only the pressure gate proves nothing there."""
    out = classify(result(), "prefix-cache")
    assert out.verdict is Verdict.VACUOUS and "prefix-cache" in out.reason


def test_red_on_the_tokens_with_every_tooth_in_place() -> None:
    out = classify(result(red=True), "preempt")
    assert out.verdict is Verdict.RED and "diverged" in out.reason


def test_red_tokens_without_teeth_are_vacuous_not_red() -> None:
    r = result(red=True)
    r = settled(replace(r, gates=[*r.gates, Gate("sensitivity", False, "degenerate", "median 1 distinct token")]))
    assert classify(r, "preempt").verdict is Verdict.VACUOUS


def test_a_fault_that_never_fired_here_leaves_the_cell_green_and_one_that_failed_inside_does_not() -> None:
    quiet = classify(result(fired=False), "preempt")
    assert quiet.verdict is Verdict.GREEN and "did not fire here" in quiet.reason
    r = result()
    broken = settled(replace(r, gates=[*r.gates, Gate("fault-fired", False, "fault_failed", "raised inside")]))
    assert classify(broken, "preempt").verdict is Verdict.VACUOUS
    unasked = settled(replace(r, gates=[*r.gates, Gate("fault", False, "unrequested_fault", "a fault ran")]))
    assert classify(unasked, "preempt").verdict is Verdict.VACUOUS


def test_deaths_loud_after_serving_refused_before_and_kvdoctors_own_failure_is_an_error() -> None:
    assert classify(died(served=True), "preempt").verdict is Verdict.LOUD
    refused = classify(died(served=False), "preempt")
    assert refused.verdict is Verdict.REFUSED and "ValueError: nope" in refused.reason
    assert classify(replace(result(), exit_code=EXIT_INTERNAL), "preempt").verdict is Verdict.ERROR
    assert {v.finding for v in Verdict} == {True, False}
    assert [v for v in Verdict if v.finding] == [Verdict.RED, Verdict.LOUD, Verdict.VACUOUS]
