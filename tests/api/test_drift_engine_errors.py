"""``kvdoctor.api.drift`` when the server's own code failed in every cell: a report with exit 3, verdict error, the
server's error and where in its verdict line, never a drift verdict (issue 41, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor import api
from tests.cli.test_drift_engine_errors import LINE, TRITON, WHERE, fake_vllm


def test_api_drift_with_vllm_failing_everywhere_is_exit_3_not_drift(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_vllm(monkeypatch, tmp_path)
    report = api.drift(server="vllm", fixture="llama-3.1-8b")
    assert (report.exit_code, report.passed, report.verdict.value) == (3, False, "error")
    assert (report.result.error_cases, report.result.drifting_cases, report.result.fields_compared) == (25, 0, 0)
    first = report.explain().splitlines()[0]
    assert first.startswith(f"verdict: ERROR — {LINE}"), first
    assert "drifting" not in report.explain()
    assert f"failed inside vLLM: RuntimeError: {TRITON} at {WHERE}" in report.explain()
