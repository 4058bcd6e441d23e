"""``sweep``: a server's configuration space searched on real servers, each red cell repeated, minimized to its flags
and bisected over releases (``kvdoctor.sweep``). The options are one typed record, :class:`SweepOptions`, the one
declaration the CLI builds too."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kvdoctor.api._job import ErrorCase, Job, Progress, check_reports, execute
from kvdoctor.sweep import page
from kvdoctor.sweep.report import SUITE, TITLE, Report
from kvdoctor.sweep.run import Sweeper, SweepOptions

if TYPE_CHECKING:
    from kvdoctor.sweep.result import SweepResult

__all__ = ["SweepJob", "SweepOptions", "sweep"]


class SweepJob(Job["SweepResult", "Report"]):
    """One sweep of OPTIONS; progress to ON_EVENT; JUnit (one case per cell) to JUNIT_PATH, the page to HTML_PATH."""

    def __init__(
        self,
        options: SweepOptions,
        *,
        junit_path: Path | None = None,
        html_path: Path | None = None,
        on_event: Progress | None = None,
        environment: bool = True,
    ) -> None:
        self.options, self.junit_path, self.html_path, self.on_event = options, junit_path, html_path, on_event
        self.environment = environment

    def check(self) -> None:
        if not isinstance(self.options, SweepOptions):
            raise TypeError(f"sweep() takes a SweepOptions, not {type(self.options).__name__}")
        self.sweeper = Sweeper(self.options, notify=self.on_event)
        self.sweeper.check(environment=self.environment)

    def preflight(self) -> None:
        check_reports(self.junit_path, self.options.output_dir)
        if self.html_path is not None:
            check_reports(self.html_path)

    def error_case(self) -> ErrorCase:
        return ErrorCase(SUITE, TITLE, self.junit_path)

    def work(self) -> SweepResult:
        return self.sweeper.run()

    def report(self, result: SweepResult) -> Report:
        return Report(result)

    def publish(self, published: Report) -> None:  # type: ignore[override]
        super().publish(published)
        if self.html_path is not None:
            page.write(self.html_path, published.result, verdict=published.verdict.word)


def sweep(
    options: SweepOptions,
    *,
    junit_path: Path | None = None,
    html_path: Path | None = None,
    on_event: Progress | None = None,
) -> Report:
    """``kvdoctor sweep MODEL... [options]``: the configurations of a t-wise covering array over the server flags
    that keep a request's state (``options.space``: the server's built-in space, or a TOML file), each a
    consistency run with those flags on the pressured subject; every red cell repeated, minimized to the flags it
    is red because of and bisected over the releases overlaid here. Returns the sweep's report (``passed``,
    ``verdict``, ``explain()``, ``to_json()``; its ``result`` is the typed
    :class:`~kvdoctor.sweep.result.SweepResult`). Bad input raises :class:`kvdoctor.InputError` before anything
    starts."""
    return execute(SweepJob(options, junit_path=junit_path, html_path=html_path, on_event=on_event))
