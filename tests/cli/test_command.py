"""The one command skeleton (kvdoctor/cli/command.py): every command's steps run in one order, each with
what it owes the user: options refused before anything is written, report paths proven before the work,
an unfinished run's JUnit error case, the status line from the report, the verdict's exit code."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer
from junitparser import Error, JUnitXml
from rich.console import Console

from kvdoctor._exceptions import EXIT_GATE, EXIT_INPUT, InputError
from kvdoctor.cli.command import CommandRun, ErrorCase, check_reports
from kvdoctor.report import junit, reportable, verdicts

SUITE = "kvdoctor.toy"


@dataclass
class Published(reportable.Reportable):
    exit_code: int
    warnings: Sequence[str] = ()
    command = "toy"
    suite = SUITE
    title = "kvdoctor toy"
    engine = None
    rules_revision = None

    def body(self) -> dict[str, int]:
        return {"answer": 42}

    def detail(self) -> str:
        return "all checked"

    def junit_cases(self) -> list[junit.Case]:
        return [junit.Case("check", junit.FAILED if self.exit_code else junit.PASSED)]

    def summary_rows(self) -> list:
        return []


@dataclass
class Toy(CommandRun[int, Published]):
    """A command whose steps record that they ran and fail where told."""

    junit_path: Path | None
    fail_at: str = ""
    exit_code: int = 0
    ran: list[str] = field(default_factory=list)
    out: io.StringIO = field(default_factory=io.StringIO)

    def _step(self, name: str) -> None:
        self.ran.append(name)
        if self.fail_at == name:
            raise InputError(f"bad {name}")

    def check(self) -> None:
        self._step("check")
        self.status = Console(file=self.out, width=100, no_color=True)

    def preflight(self) -> None:
        self._step("preflight")
        check_reports(self.junit_path)

    def error_case(self) -> ErrorCase:
        return ErrorCase(SUITE, "kvdoctor toy", self.junit_path)

    def work(self) -> int | None:
        self._step("work")
        return None if self.fail_at == "dry-run" else 7

    def deliver(self, result: int) -> Published:
        self._step("deliver")
        published = Published(self.exit_code)
        reportable.publish(published, junit_path=self.junit_path, env={})
        return published

    def after(self, published: Published) -> None:
        self._step("after")


@pytest.fixture(autouse=True)
def fresh_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("KVDOCTOR_DEBUG", raising=False)
    verdicts.forget()


def earlier_green(path: Path) -> None:
    junit.write(path, SUITE, [junit.Case("earlier-run", junit.PASSED)])


def cases(path: Path) -> list[tuple[str, object]]:
    return [(c.name, c.result[0] if c.result else None) for s in JUnitXml.fromfile(str(path)) for c in s]


def exit_of(toy: Toy) -> int:
    try:
        toy()
    except typer.Exit as exc:
        return exc.exit_code
    return 0


def test_the_steps_run_in_order_and_the_status_line_follows_the_report(tmp_path: Path) -> None:
    toy = Toy(tmp_path / "r.xml", exit_code=EXIT_GATE)
    assert exit_of(toy) == EXIT_GATE
    assert toy.ran == ["check", "preflight", "work", "deliver", "after"]
    assert toy.out.getvalue() == "verdict: FAILED — all checked\n"
    assert [name for name, _ in cases(tmp_path / "r.xml")] == ["check"]


def test_a_green_run_exits_0_with_its_line(tmp_path: Path) -> None:
    toy = Toy(tmp_path / "r.xml")
    assert exit_of(toy) == 0
    assert toy.out.getvalue() == "verdict: passed — all checked\n"


def test_bad_options_exit_2_before_any_report_is_touched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r.xml"
    earlier_green(report)
    toy = Toy(report, fail_at="check")
    assert exit_of(toy) == EXIT_INPUT
    assert toy.ran == ["check"]
    assert capsys.readouterr().err == "kvdoctor: error: bad check\n"
    assert cases(report) == [("earlier-run", None)]  # the options step keeps no record


def test_an_unwritable_report_path_is_refused_before_the_work(tmp_path: Path) -> None:
    toy = Toy(tmp_path / "no-such-dir" / "sub" / "r.xml")
    (tmp_path / "no-such-dir").write_text("a file, not a directory", encoding="utf-8")
    assert exit_of(toy) == EXIT_INPUT
    assert toy.ran == ["check", "preflight"]  # the work never started


def test_a_failure_in_the_work_replaces_an_earlier_pass_with_this_runs_error(tmp_path: Path) -> None:
    report = tmp_path / "r.xml"
    earlier_green(report)
    toy = Toy(report, fail_at="work")
    assert exit_of(toy) == EXIT_INPUT
    assert toy.ran == ["check", "preflight", "work"]
    ((name, outcome),) = cases(report)
    assert name == "kvdoctor" and isinstance(outcome, Error) and outcome.message == "bad work"


def test_a_run_without_a_verdict_publishes_nothing_and_says_no_verdict(tmp_path: Path) -> None:
    toy = Toy(tmp_path / "r.xml", fail_at="dry-run")
    assert exit_of(toy) == 0
    assert toy.ran == ["check", "preflight", "work"]
    assert toy.out.getvalue() == "" and not (tmp_path / "r.xml").exists()
