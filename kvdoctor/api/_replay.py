"""``replay``: public bugs replayed inside real servers, each beside its green control (``kvdoctor.replay``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor._exceptions import InputError
from kvdoctor.api._job import ErrorCase, Job, Progress, check_reports, execute, names
from kvdoctor.api._keywords import keyword_function, own
from kvdoctor.core.declared import option
from kvdoctor.replay import run as replay_run
from kvdoctor.replay.plan import select
from kvdoctor.replay.report import SUITE, TITLE, Report

if TYPE_CHECKING:
    from kvdoctor.replay.run import Matrix

DEFAULT_OUTPUT_DIR = Path("kvdoctor-out/replay")


@dataclass(frozen=True)
class ReplayArgs:
    """A ``replay``'s options, each declared once here: ``kvdoctor replay``'s options and
    :func:`kvdoctor.api.replay`'s keyword arguments are made from these fields (``kvdoctor.core.declared``)."""

    bug: str | Sequence[str] | None = option(None, "--bug", help="A bug id to replay (sglang#23773); repeatable.")
    every: bool = option(False, "--all", help="Replay every bug that has a case.")
    output_dir: Path = option(
        DEFAULT_OUTPUT_DIR, "--output-dir", help="Run directories and the checkpoint cache go here."
    )
    timeout_s: float = option(
        1800.0, "--timeout", help="Seconds for each deployment's whole run (> 0).", keyword="timeout"
    )
    junit_path: Path | None = option(None, "--junit", help="Write JUnit XML, one case per bug.")


class ReplayJob(Job["Matrix", "Report"]):
    """The bugs ARGS chose (or every one with a case), each case's control and subject, on as few launches as the
    cases allow; progress to ON_EVENT."""

    def __init__(self, args: ReplayArgs, *, on_event: Progress | None = None) -> None:
        self.bugs, self.every, self.output_dir, self.timeout = (
            names(args.bug),
            args.every,
            args.output_dir,
            args.timeout_s,
        )
        self.junit_path, self.on_event = args.junit_path, on_event

    def check(self) -> None:
        if not self.timeout > 0:
            raise InputError(f"--timeout must be > 0 seconds, got {self.timeout}")
        self.chosen = select(self.bugs, every=self.every)
        self.runner = replay_run.RealRunner()

    def preflight(self) -> None:
        self.runner.check_environment(self.chosen, "kvdoctor replay")
        check_reports(self.junit_path, self.output_dir)

    def error_case(self) -> ErrorCase:
        return ErrorCase(SUITE, TITLE, self.junit_path)

    def work(self) -> Matrix:
        prepared = replay_run.prepare(
            self.chosen, replay_run.Settings(self.output_dir, self.timeout), self.runner
        )  # bad input: exit 2 here
        return replay_run.run(prepared, self.runner, notify=self.on_event)

    def report(self, result: Matrix) -> Report:
        return Report(result)


def _replay(args: ReplayArgs, *, on_event: Progress | None = None) -> Report:
    return execute(ReplayJob(args, on_event=on_event))


replay = keyword_function(
    ReplayArgs,
    _replay,
    name="replay",
    module=__name__,
    doc="""``kvdoctor replay --bug ID ... | --all``: each public bug's subject (its fault armed inside the real server,
    or the release that carries it) beside its green control, each for the right reason (docs/bugs.md). Returns the
    matrix's report: ``passed`` when every chosen bug reproduced; its ``result`` is the typed matrix.""",
    extra=(own("on_event", "Progress | None", None),),
)
