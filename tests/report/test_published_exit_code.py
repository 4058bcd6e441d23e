"""A run whose own reports already say how it ended (pd-eval: "deployment failed", exit 3) keeps them when
the process exits with that very code; any other code still replaces them (kvdoctor/report/verdicts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from junitparser import Error, JUnitXml

from kvdoctor.report import junit, verdicts

SUITE = "kvdoctor pd-eval"


@pytest.fixture(autouse=True)
def no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def _published(report: Path, exit_code: int) -> None:
    with verdicts.errors_published(SUITE, "kvdoctor pd-eval", junit_path=report):
        pass
    case = junit.Case("deployment", junit.ERROR, "crashed: decode exited", details="decode exited")
    verdicts.publish(SUITE, [case], "", junit_path=report, exit_code=exit_code)


def _cases(report: Path) -> list[tuple[str, str]]:
    return [(c.name, c.result[0].message) for s in JUnitXml.fromfile(str(report)) for c in s]


def test_the_code_a_verdict_was_published_for_keeps_it(tmp_path: Path) -> None:
    """Without the published code, exit 3 read as "did not finish" and wiped the run's own deployment case."""
    report = tmp_path / "r.xml"
    _published(report, 3)
    verdicts.unfinished(3, None)
    assert _cases(report) == [("deployment", "crashed: decode exited")]


def test_another_code_after_the_verdict_still_replaces_it(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    _published(report, 3)
    verdicts.unfinished(143, None)
    (case,) = [c for s in JUnitXml.fromfile(str(report)) for c in s]
    assert case.name == "kvdoctor" and isinstance(case.result[0], Error) and "SIGTERM" in case.result[0].message
