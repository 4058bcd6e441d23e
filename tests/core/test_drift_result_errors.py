"""A drift cell where the server's own code failed is an error, counted apart from drift (issue 41, item 3)."""

from __future__ import annotations

from kvdoctor.core.drift_result import (
    ArchitectureTotals,
    DriftReport,
    GeneratedDriftReport,
    VllmCaseResult,
    VllmFieldDrift,
)
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.report.drift_report import Report

VLLM = EngineRef("vllm", "0.34.0", None)
FAILED = "RuntimeError: vLLM on x86 CPUs requires Triton (triton-cpu). at vllm/platforms/cpu.py:243"


def cell(case: str, *, drift: bool = False, error: str | None = None) -> VllmCaseResult:
    found = [VllmFieldDrift("q", "1", "2")] if drift else []
    return VllmCaseResult("m", case, (), 0 if error else 4, found, None, None, 0.1, error)


def test_an_error_cell_is_neither_ok_nor_drift() -> None:
    c = cell("a", error=FAILED)
    assert (c.status, c.ok, c.drift, c.error) == ("error", False, [], FAILED)
    assert (cell("b").status, cell("c", drift=True).status) == ("ok", "drift")


def test_the_report_counts_errors_apart_and_the_exit_code_follows() -> None:
    every = DriftReport(VLLM, [cell("a", error=FAILED), cell("b", error=FAILED)], 1.0, None)
    assert (every.error_cases, every.drifting_cases, every.fields_compared, every.ok) == (2, 0, 0, False)
    assert every.errors() == [(FAILED, 2)]
    assert Report(every).exit_code == 3
    assert Report(every).detail() == f"2 of 2 cases failed inside vLLM ({FAILED}); 0 fields compared, 1.0 s"
    partly = DriftReport(VLLM, [cell("a"), cell("b", error="ValueError: x at vllm/y.py:1")], 1.0, None)
    assert (Report(partly).exit_code, partly.error_cases, partly.drifting_cases) == (3, 1, 0)
    both = DriftReport(VLLM, [cell("a", drift=True), cell("b", error=FAILED)], 1.0, None)
    assert (Report(both).exit_code, both.drifting, both.errored) == (1, [both.results[0]], [both.results[1]])
    assert Report(DriftReport(VLLM, [cell("a", drift=True)], 1.0, None)).exit_code == 1


def test_an_error_in_the_reported_generated_set_is_still_no_pass() -> None:
    totals = ArchitectureTotals(1, 1, 1)
    report = GeneratedDriftReport(VLLM, [cell("a", drift=True), cell("b", error=FAILED)], 1.0, None, totals)
    assert Report(report).exit_code == 3  # drift there is reported (exit 0), an error is not a pass
    assert Report(GeneratedDriftReport(VLLM, [cell("a", drift=True)], 1.0, None, totals)).exit_code == 0
