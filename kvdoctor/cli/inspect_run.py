"""The steps every ``kvdoctor inspect`` shares, whichever server the launch line is for (:class:`InspectRun`).

Its own module so that each server's command (``cli/inspect_cmd.py`` for SGLang, ``cli/inspect_vllm.py``
for vLLM) stands on it without importing the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kvdoctor.cli.command import CommandRun, check_reports
from kvdoctor.engines import Adapter, GpuArch, Inspected

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.report import github
    from kvdoctor.report.inspect_report import Report


class InspectRun(CommandRun[Inspected, "Report"]):
    """One ``kvdoctor inspect`` (the steps of ``kvdoctor.cli.command``): the output, the verdict line, then
    JUnit and the step summary. A server's subclass answers (:meth:`work`, setting :attr:`title`), draws its
    tables (:meth:`render`) and names its model's fact rows (:meth:`facts`)."""

    title: str  # the step summary's heading, once the launch line named the model

    def __init__(
        self,
        ctx: typer.Context,
        model: str | None,
        adapter: Adapter,
        *,
        gpu_arch: GpuArch,
        request_tokens: int,
        concurrent: int,
        json_output: bool,
        strict: bool,
        junit_path: Path | None,
    ) -> None:
        self.ctx, self.model, self.adapter = ctx, model, adapter
        self.gpu_arch, self.request_tokens, self.concurrent = gpu_arch, request_tokens, concurrent
        self.json_output, self.strict, self.junit_path = json_output, strict, junit_path

    def preflight(self) -> None:
        check_reports(self.junit_path)  # before any work: a red verdict must not end as exit 2

    def render(self, report: Any, console: Console) -> None:
        """The server's tables for REPORT."""
        raise NotImplementedError

    def facts(self, report: Any) -> tuple[github.Row, ...]:
        """The model's facts in the step summary (none when the rule model did not answer); asked only when
        a step summary is written."""
        return ()

    def deliver(self, result: Inspected) -> Report:
        from kvdoctor.report import reportable
        from kvdoctor.report.inspect_report import Report

        published = Report(
            result.report,
            self.title,
            self.strict,
            result.engine,
            result.drifts,
            self.facts,
            tuple(self.ctx.command_path.split()[1:]),
        )
        if self.json_output:
            import json

            typer.echo(json.dumps(reportable.json_document(published), indent=2))
        else:
            from rich.console import Console

            self.status = Console(emoji=False)
            self.render(result.report, self.status)
        return published

    def after(self, published: Report) -> None:
        from kvdoctor.report import reportable

        reportable.publish(published, junit_path=self.junit_path)  # JUnit fails exactly when the exit code says
