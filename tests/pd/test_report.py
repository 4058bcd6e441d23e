"""JUnit cases, step-summary rows and annotations built from one PdEvalResult."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from kvdoctor._exceptions import InputError
from kvdoctor.deploy.metrics import RetractionCount
from kvdoctor.pd import gate, publish
from kvdoctor.pd import report as pd_report
from kvdoctor.pd.result import PdEvalResult, Score
from kvdoctor.report.preflight import check_outputs


def base() -> PdEvalResult:
    return PdEvalResult(
        model="m",
        preset="generic",
        threshold=0.8,
        num_shots=5,
        num_questions=10,
        data_sha256="x",
        data_source="data-path",
    )


def test_deployment_failure_marks_every_gate_as_not_run() -> None:
    result = base()
    result.exit_reason, result.message = "server_exited", "decode exited with code 3"
    cases = pd_report.junit_cases(result)
    assert [(c.name, c.status) for c in cases] == [
        ("deployment", "error"),
        ("accuracy", "error"),
        ("retraction", "error"),
    ]
    assert [line.split("::")[1] for line in pd_report.annotations(result)] == ["error title=pd-eval server_exited"]


def test_gate_failure_annotates_each_failed_gate() -> None:
    result = base()
    result.score = Score(accuracy=0.5, invalid_rate=0.1, num_questions=10, completion_tokens=100, latency_s=2.0)
    result.gates = [gate.accuracy(0.5, 0.8), gate.retraction(RetractionCount(0, "metrics"), allow_none=False)]
    result.exit_reason, result.exit_code = "accuracy_below_threshold", 1
    lines = pd_report.annotations(result)
    assert len(lines) == 2 and all(line.startswith("::error title=pd-eval ") for line in lines)
    rows = {r.check: r for r in pd_report.summary_rows(result)}
    assert rows["accuracy"].status == "failed" and rows["accuracy"].value == "0.500"
    assert rows["output throughput"].value == "50.0 token/s"
    assert "**FAILED** (accuracy_below_threshold)" in pd_report.step_summary(result)


def test_finish_returns_the_results_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = base()
    result.exit_code, result.exit_reason = 3, "server_exited"
    finished = publish.finish(
        result,
        tmp_path,
        junit_path=tmp_path / "j.xml",
        json_out=True,
        console=Console(stderr=True),
        env={"GITHUB_ACTIONS": "true"},
    )
    assert finished.exit_code == 3 and finished.verdict == "error"
    out, err = capsys.readouterr()
    assert json.loads(out)["exit_reason"] == "server_exited"
    assert json.loads((tmp_path / "result.json").read_text())["exit_code"] == 3
    assert "::error title=pd-eval server_exited::" in err  # annotations in GitHub Actions


def test_unwritable_report_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = base()
    result.exit_code = 0
    for out_dir, junit_path in ((blocker / "out", None), (tmp_path, blocker / "junit.xml")):
        with pytest.raises(InputError, match="cannot write a report"):
            pd_report.write_all(result, out_dir, junit_path=junit_path, env={})
        finished = publish.finish(
            result, out_dir, junit_path=junit_path, json_out=False, console=Console(file=io.StringIO()), env={}
        )
        assert finished.exit_code == 2 and finished.verdict == "error"
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("kvdoctor: error: cannot write")


@pytest.mark.parametrize("case", ["output-under-file", "junit-dir", "junit-under-file", "summary-dir"])
def test_check_writable_refuses_what_would_fail_later(tmp_path: Path, case: str) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out, junit_path, env = tmp_path / "new" / "out", None, {}
    if case == "output-under-file":
        out = blocker / "out"
    elif case == "junit-dir":
        junit_path = tmp_path
    elif case == "junit-under-file":
        junit_path = blocker / "deeper" / "j.xml"
    else:
        env = {"GITHUB_STEP_SUMMARY": str(tmp_path)}
    check_outputs(output_dir=tmp_path / "ok", junit_path=None, env={})  # the happy path creates nothing
    with pytest.raises(InputError):
        check_outputs(output_dir=out, junit_path=junit_path, env=env)
    assert not (tmp_path / "new").exists() and not (tmp_path / "ok").exists()


def test_the_summary_head_renders_a_hostile_model_and_message_as_text() -> None:
    """Issue 43 (21): the step summary's head wrote the model and the server's message raw (a model named
    ``<img ...>`` became HTML; ``|`` or a backtick became Markdown)."""
    result = base()
    result.model = "<img src=x onerror=alert(1)>|`m`"
    result.exit_reason, result.message = "server_exited", "decode said <b>bold</b> | *x*"
    head = pd_report.Report(result).summary_head()
    assert "<img" not in head and "<b>" not in head and "&lt;img" in head
    assert "\\|" in head and "\\`m\\`" in head and "\\*x\\*" in head
    assert pd_report.status_line(result).endswith("decode said <b>bold</b> | *x*")  # the terminal's line, as said
