"""The steps every ``kvdoctor inspect`` shares, whichever server the launch line is for (:class:`InspectRun`).

The answer is :class:`kvdoctor.api.InspectJob`'s (the job :func:`kvdoctor.api.inspect` executes), the server's
API room's (``kvdoctor.api._servers``); the terminal's tables are the server's subclass in its renderer's room
(``cli/render/sglang.py``, ``cli/render/vllm.py``), so each stands on this module without importing the other.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import typer

from kvdoctor.api._inspect import inspect_job
from kvdoctor.api._inspect_args import InspectArgs
from kvdoctor.cli.command import CommandRun
from kvdoctor.cli.launch import own_options
from kvdoctor.engines import Adapter, Inspected
from kvdoctor.report import reportable

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.api._job import ErrorCase
    from kvdoctor.report.inspect_report import Report


class InspectRun(CommandRun[Inspected, "Report"]):
    """One ``kvdoctor inspect`` (the steps of ``kvdoctor.cli.command``) around its server's job: the output, the
    verdict line, then JUnit and the step summary. A server's subclass draws its tables (:meth:`render`)."""

    def __init__(self, ctx: typer.Context, args: InspectArgs, adapter: Adapter, *, json_output: bool) -> None:
        self.ctx, self.model, self.json_output = ctx, args.model, json_output
        argv = tuple(ctx.command_path.split()[1:])
        self.job = inspect_job(args, own_options=own_options(ctx), argv=argv)
        self.job.adapter = adapter

    def preflight(self) -> None:
        self.job.preflight()  # before any work: a red verdict must not end as exit 2

    def error_case(self) -> ErrorCase | None:
        return self.job.error_case()

    def work(self) -> Inspected:
        return self.job.work()

    def render(self, report: Any, console: Console) -> None:
        """The server's tables for REPORT."""
        raise NotImplementedError

    def deliver(self, result: Inspected) -> Report:
        for note in result.notes:  # e.g. why vLLM did not answer (the rule model still did)
            print(f"kvdoctor: note: {note}", file=sys.stderr)
        published = self.job.report(result)
        if self.json_output:
            import json

            typer.echo(json.dumps(reportable.json_document(published), indent=2))
        else:
            from rich.console import Console

            self.status = Console(emoji=False)
            self.render(result.report, self.status)
        return published

    def after(self, published: Report) -> None:
        self.job.publish(published)  # JUnit fails exactly when the exit code says
