"""JUnit cases, step-summary rows and annotations built from one PdEvalResult."""

from __future__ import annotations

from kvdoctor.pd import gate, reporting
from kvdoctor.pd.metrics import RetractionCount
from kvdoctor.pd.result import PdEvalResult, Score


def base() -> PdEvalResult:
    return PdEvalResult(model="m", preset="generic", threshold=0.8, num_shots=5, num_questions=10,
                        data_sha256="x", data_source="data-path")


def test_deployment_failure_marks_every_gate_as_not_run() -> None:
    result = base()
    result.exit_reason, result.message = "server_exited", "decode exited with code 3"
    cases = reporting.junit_cases(result)
    assert [(c.name, c.status) for c in cases] == [
        ("deployment", "error"), ("accuracy", "error"), ("retraction", "error")]
    assert [line.split("::")[1] for line in reporting.annotations(result)] == [
        "error title=pd-eval server_exited"]


def test_gate_failure_annotates_each_failed_gate() -> None:
    result = base()
    result.score = Score(accuracy=0.5, invalid_rate=0.1, num_questions=10, completion_tokens=100,
                         latency_s=2.0)
    result.gates = [gate.accuracy(0.5, 0.8),
                    gate.retraction(RetractionCount(0, "metrics"), allow_none=False)]
    result.exit_reason = "accuracy_below_threshold"
    lines = reporting.annotations(result)
    assert len(lines) == 2 and all(line.startswith("::error title=pd-eval ") for line in lines)
    rows = {r.check: r for r in reporting.summary_rows(result)}
    assert rows["accuracy"].status == "failed" and rows["accuracy"].value == "0.500"
    assert rows["output throughput"].value == "50.0 token/s"
    assert "**FAILED** (accuracy_below_threshold)" in reporting.step_summary(result)
