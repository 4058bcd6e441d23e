"""One protocol read by every reporter (kvdoctor/report/reportable.py): the JSON header, the status line,
JUnit and the step summary all take their verdict from the same report, and each command's
report keeps the exact outputs the command had before the protocol."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from junitparser import JUnitXml

from kvdoctor._exceptions import EXIT_GATE, EXIT_INPUT, EXIT_PASS
from kvdoctor.consistency import report as consistency_report
from kvdoctor.consistency.gates import Gate
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.pd import report as pd_report
from kvdoctor.pd.gate import GateResult
from kvdoctor.pd.result import PdEvalResult
from kvdoctor.report import envelope, github, junit, reportable


@dataclass(frozen=True)
class Sample(reportable.Reportable):
    exit_code: int
    warnings: Sequence[str] = ()
    command = "sample"
    suite = "kvdoctor.sample"
    title = "kvdoctor sample"
    engine = None
    rules_revision = "r1"

    def body(self) -> dict[str, object]:
        return {"answer": 42, "exit_code": "the header decides"}

    def detail(self) -> str:
        return "one check"

    def junit_cases(self) -> list[junit.Case]:
        return [junit.Case("check", junit.PASSED if self.exit_code == EXIT_PASS else junit.FAILED)]

    def summary_rows(self) -> list[github.Row]:
        return [github.Row("check", "v", "t", "passed")]


@pytest.mark.parametrize(
    ("code", "warnings", "word"),
    [(EXIT_PASS, (), "pass"), (EXIT_PASS, ("w",), "warn"), (EXIT_GATE, ("w",), "fail"), (EXIT_INPUT, (), "error")],
)
def test_the_verdict_is_the_json_headers_verdict(code: int, warnings: tuple[str, ...], word: str) -> None:
    sample = Sample(code, warnings)
    doc = reportable.json_document(sample)
    assert sample.verdict.value == doc["verdict"] == word
    assert doc["exit_code"] == code and doc["answer"] == 42 and doc["rules_revision"] == "r1"
    assert doc["command"] == "sample" and doc["command_line"] == ["kvdoctor", "sample"]
    assert list(doc)[: len(envelope.RunHeader.__dataclass_fields__)] == list(envelope.RunHeader.__dataclass_fields__)


def test_the_step_summary_and_junit_are_read_from_the_protocol(tmp_path: Path) -> None:
    sample = Sample(EXIT_GATE)
    summary = tmp_path / "summary.md"
    reportable.publish(sample, junit_path=tmp_path / "r.xml", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert summary.read_text(encoding="utf-8") == (
        "### kvdoctor sample\n\n**FAILED**\n\n| check | value | threshold | result |\n|---|---|---|---|\n"
        "| check | v | t | ✅ pass |\n\n"
    )
    (suite,) = JUnitXml.fromfile(str(tmp_path / "r.xml"))
    assert suite.name == "kvdoctor.sample" and [c.classname for c in suite] == ["kvdoctor"]


def _consistency(exit_code: int) -> ConsistencyResult:
    gate = Gate("tokens", exit_code == EXIT_PASS, "passed" if exit_code == EXIT_PASS else "diverged", "4/4")
    return ConsistencyResult(
        "llama-3.1-8b",
        "dense",
        "pd",
        "cpu",
        True,
        {"requests": 4},
        gates=[gate],
        exit_code=exit_code,
        exit_reason="passed",
        warnings=["a warning"],
    )


def test_consistency_publishes_as_before() -> None:
    published = consistency_report.Report(_consistency(EXIT_PASS))
    assert published.verdict is envelope.Verdict.WARN and published.detail() == published.result.summary_line()
    assert reportable.step_summary(published) == github.summary_markdown(
        "kvdoctor consistency llama-3.1-8b (pd, cpu)",
        "**passed with warnings**",
        consistency_report.rows(published.result),
    )
    doc = consistency_report.json_document(published.result)
    assert doc["command"] == "consistency" and doc["command_line"] == ["kvdoctor"]  # no fallback, as before
    assert doc["rules_revision"] is None and doc["engine"]["name"] == "sglang"
    assert (published.suite, published.classname) == ("consistency", "kvdoctor")


def _pd(exit_code: int) -> PdEvalResult:
    r = PdEvalResult("m", "generic", 0.8, 5, 10, "x", "data-path")
    r.exit_code, r.exit_reason, r.message = exit_code, "passed", "ok"
    r.gates = [GateResult("retraction", "skipped", "decode never retracted (allowed)", "no_retraction")]
    return r


def test_pd_eval_publishes_as_before_and_a_lost_report_overrides_only_the_exit() -> None:
    run = _pd(EXIT_PASS)
    own = pd_report.Report(run)
    assert own.verdict is envelope.Verdict.WARN and list(own.warnings) == run.warnings
    assert pd_report.step_summary(run) == github.summary_markdown(
        "kvdoctor pd-eval",
        pd_report.status_line(run, markdown=True),
        pd_report.summary_rows(run),
        pd_report.summary_details(run),
    )
    assert (own.suite, own.classname, own.argv_fallback()) == ("kvdoctor pd-eval", "kvdoctor.pd_eval", ("pd-eval",))
    lost = pd_report.Report(run, EXIT_INPUT)
    doc = reportable.json_document(lost)
    assert (lost.exit_code, lost.verdict, list(lost.warnings)) == (EXIT_INPUT, envelope.Verdict.ERROR, [])
    assert doc["exit_code"] == EXIT_INPUT and doc["verdict"] == "error" and doc["passed"] is False
    assert lost.detail() == "a report could not be written (see the error above)"
    assert pd_report.document(run, exit_code=EXIT_INPUT)["exit_code"] == EXIT_INPUT
