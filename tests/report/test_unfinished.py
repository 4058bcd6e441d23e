"""The one "run did not finish" publisher (kvdoctor/report/verdicts.py): whatever stops a run before or
after its verdict (an error, Ctrl-C, SIGTERM, output that could not be delivered) leaves this run's
JUnit error case, never an earlier run's pass, and never contradicts the exit code."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from junitparser import Error, JUnitXml

from kvdoctor._exceptions import InputError, Interrupted
from kvdoctor.report import junit, verdicts

SUITE = "kvdoctor.drift"


def earlier_green(path: Path) -> None:
    junit.write(path, SUITE, [junit.Case("earlier-run", junit.PASSED)])


def only_case(path: Path) -> tuple[str, object]:
    (case,) = [case for suite in JUnitXml.fromfile(str(path)) for case in suite]
    return case.name, (case.result[0] if case.result else None)


@pytest.fixture(autouse=True)
def no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.mark.parametrize(
    ("stop", "words"),
    [
        (KeyboardInterrupt(), "interrupted (SIGINT)"),
        (Interrupted(signal.SIGTERM), "terminated (SIGTERM)"),
        (InputError("bad"), "bad"),
    ],
    ids=["ctrl-c", "sigterm", "input-error"],
)
def test_what_stops_the_work_is_this_runs_error_case(tmp_path: Path, stop: BaseException, words: str) -> None:
    """Before: only ``Exception`` was caught; Ctrl-C and SIGTERM (BaseExceptions) left the earlier pass."""
    report = tmp_path / "r.xml"
    earlier_green(report)
    with pytest.raises(type(stop)), verdicts.errors_published(SUITE, "kvdoctor drift", junit_path=report):
        raise stop
    name, result = only_case(report)
    assert name == "kvdoctor" and isinstance(result, Error) and words in result.message
    verdicts.unfinished(2, "ignored")  # already said: not written twice
    assert only_case(report)[1].message == result.message


def _opened(report: Path) -> None:
    earlier_green(report)
    with verdicts.errors_published(SUITE, "kvdoctor drift", junit_path=report):
        pass  # the work finished; nothing published yet


def test_a_run_stopped_before_its_verdict_is_published_gets_the_error_at_exit(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    _opened(report)
    verdicts.unfinished(143, None)
    name, result = only_case(report)
    assert name == "kvdoctor" and isinstance(result, Error) and "terminated (SIGTERM)" in result.message


def test_output_lost_after_a_published_green_verdict_replaces_it(tmp_path: Path) -> None:
    """drift publishes, then prints: stdout lost there (exit 2) must not leave a green JUnit behind."""
    report = tmp_path / "r.xml"
    _opened(report)
    verdicts.publish(SUITE, [junit.Case("cell", junit.PASSED)], "", junit_path=report)
    verdicts.unfinished(2, "cannot write the report to standard output: No space left on device")
    name, result = only_case(report)
    assert name == "kvdoctor" and isinstance(result, Error) and "No space left" in result.message


@pytest.mark.parametrize("code", [0, 1])
def test_a_published_verdict_that_agrees_with_the_exit_code_is_kept(tmp_path: Path, code: int) -> None:
    report = tmp_path / "r.xml"
    _opened(report)
    status = junit.PASSED if code == 0 else junit.FAILED
    verdicts.publish(SUITE, [junit.Case("cell", status)], "", junit_path=report)
    verdicts.unfinished(code, None)
    assert only_case(report)[0] == "cell"


def test_another_suite_publishing_does_not_close_the_run(tmp_path: Path) -> None:
    """pd-eval publishes through the same function under its own suite: it cannot close drift's run."""
    report, other = tmp_path / "r.xml", tmp_path / "other.xml"
    _opened(report)
    verdicts.publish("kvdoctor.pd_eval", [junit.Case("gate", junit.PASSED)], "", junit_path=other)
    verdicts.unfinished(130, None)
    assert isinstance(only_case(report)[1], Error)


@pytest.mark.parametrize(
    ("signum", "word", "code"),
    [
        (signal.SIGINT, "interrupted", 130),
        (signal.SIGTERM, "terminated", 143),
        (signal.SIGHUP, "stopped by SIGHUP", 129),
    ],
)
def test_every_report_names_a_signal_as_stderr_does(signum: int, word: str, code: int) -> None:
    """The stderr line and the JUnit error case read one wording (``Interrupted.word``): a SIGHUP run is
    never "terminated" in its JUnit file while stderr says "stopped by SIGHUP"."""
    from kvdoctor.cli.errors import signal_exit

    assert signal_exit(signum) == (f"kvdoctor: {word}", code)
    exit_code, message = verdicts.run_error(Interrupted(signum))
    assert exit_code == code and message.startswith(f"{word} ({signal.Signals(signum).name})")
