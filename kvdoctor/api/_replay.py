"""``replay``: public bugs replayed inside real servers, each beside its green control (``kvdoctor.replay``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor._exceptions import InputError
from kvdoctor.api._arguments import checked
from kvdoctor.api._job import ErrorCase, Job, Progress, check_reports, execute, names

if TYPE_CHECKING:
    from kvdoctor.replay.report import Report
    from kvdoctor.replay.run import Matrix

DEFAULT_OUTPUT_DIR = Path("kvdoctor-out/replay")


class ReplayJob(Job["Matrix", "Report"]):
    """The chosen BUGS (or EVERY one with a case), each case's control and subject, on as few launches as the cases
    allow; progress to ON_EVENT."""

    def __init__(
        self,
        bugs: tuple[str, ...],
        every: bool,
        output_dir: Path,
        timeout: float,
        *,
        junit_path: Path | None = None,
        on_event: Progress | None = None,
    ) -> None:
        self.bugs, self.every, self.output_dir, self.timeout = bugs, every, output_dir, timeout
        self.junit_path, self.on_event = junit_path, on_event

    def check(self) -> None:
        from kvdoctor.replay.plan import select
        from kvdoctor.replay.run import RealRunner

        if not self.timeout > 0:
            raise InputError(f"--timeout must be > 0 seconds, got {self.timeout}")
        self.chosen = select(self.bugs, every=self.every)
        self.runner = RealRunner()

    def preflight(self) -> None:
        self.runner.check_environment(self.chosen, "kvdoctor replay")
        check_reports(self.junit_path, self.output_dir)

    def error_case(self) -> ErrorCase:
        from kvdoctor.replay.report import SUITE, TITLE

        return ErrorCase(SUITE, TITLE, self.junit_path)

    def work(self) -> Matrix:
        from kvdoctor.replay.run import Settings, prepare, run

        prepared = prepare(self.chosen, Settings(self.output_dir, self.timeout), self.runner)  # bad input: exit 2 here
        return run(prepared, self.runner, notify=self.on_event)

    def report(self, result: Matrix) -> Report:
        from kvdoctor.replay.report import Report

        return Report(result)


@checked
def replay(
    *,
    bug: str | Sequence[str] | None = None,
    every: bool = False,
    output_dir: Path = DEFAULT_OUTPUT_DIR,
    timeout: float = 1800.0,
    junit_path: Path | None = None,
    on_event: Progress | None = None,
) -> Report:
    """``kvdoctor replay --bug ID ... | --all``: each public bug's subject (its fault armed inside the real server,
    or the release that carries it) beside its green control, each for the right reason (docs/bugs.md). Returns the
    matrix's report: ``passed`` when every chosen bug reproduced; its ``result`` is the typed matrix."""
    return execute(ReplayJob(names(bug), every, output_dir, timeout, junit_path=junit_path, on_event=on_event))
