"""``kvdoctor drift``: kvdoctor's rules against the installed SGLang over every fixture x a launch matrix.

One typed result (:class:`~kvdoctor.core.sglang.drift_result.DriftReport`) feeds every output through its
:class:`~kvdoctor.report.drift_publication.Publication`: ``--json`` (the shared header, then the report's own
keys; ``kvdoctor schema drift``), the table, JUnit (one case per matrix cell) and the step summary. A cell
fails in JUnit exactly when it drifts, and the command exits 1 exactly when one does, so the CI file and
the exit code cannot disagree. Its reports are written first, then its output (the steps of
``kvdoctor.cli.command``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvdoctor.cli.command import CommandRun, Record, check_reports
from kvdoctor.cli.options import GpuArchOption
from kvdoctor.cli.progress import with_progress
from kvdoctor.cli.text import safe
from kvdoctor.engines import Capability, Engine, GpuArch, require

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.core.sglang.drift_result import DriftReport
    from kvdoctor.report.drift_publication import Publication


def drift(
    fixture: Annotated[
        list[str] | None, typer.Option("--fixture", help="Only this bundled fixture (repeatable).")
    ] = None,
    case: Annotated[list[str] | None, typer.Option("--case", help="Only this launch case (repeatable).")] = None,
    gpu_arch: GpuArchOption = GpuArch.SM100,
    json_output: bool = typer.Option(
        False, "--json", help="Print one JSON object instead of tables (schema: kvdoctor schema drift)."
    ),
    junit_path: Annotated[
        Path | None, typer.Option("--junit", help="Write JUnit XML: one case per matrix cell.")
    ] = None,
) -> None:
    """Compare kvdoctor's frozen rules with the installed SGLang on every fixture x launch case.

    Needs SGLang importable (make sglang-env; run .venv-sglang/bin/kvdoctor drift). Exit 0 when every
    field agrees, 1 on any drift, 2 on bad input.
    """
    DriftRun(tuple(fixture or ()), tuple(case or ()), gpu_arch, json_output=json_output, junit_path=junit_path)()


class DriftRun(CommandRun["DriftReport", "Publication"]):
    """One ``kvdoctor drift`` (the steps of ``kvdoctor.cli.command``): JUnit and the summary, then the output."""

    def __init__(
        self,
        fixtures: tuple[str, ...],
        cases: tuple[str, ...],
        gpu_arch: GpuArch,
        *,
        json_output: bool,
        junit_path: Path | None,
    ) -> None:
        self.fixtures, self.cases, self.gpu_arch = fixtures, cases, gpu_arch
        self.json_output, self.junit_path = json_output, junit_path

    def preflight(self) -> None:
        check_reports(self.junit_path)

    def record(self) -> Record:
        from kvdoctor.report.drift_publication import SUITE, TITLE

        return Record(SUITE, TITLE, self.junit_path)

    def work(self) -> DriftReport:
        adapter = require(Engine.SGLANG, Capability.DRIFT)  # the installed SGLang is the other side
        if self.json_output:
            return adapter.drift(self.fixtures, self.cases, self.gpu_arch, None)
        return with_progress(
            lambda update: adapter.drift(self.fixtures, self.cases, self.gpu_arch, update), "import SGLang"
        )

    def deliver(self, result: DriftReport) -> Publication:
        from kvdoctor.report import publishable
        from kvdoctor.report.drift_publication import Publication

        published = Publication(result)
        publishable.publish(published, junit_path=self.junit_path)
        if self.json_output:
            typer.echo(json.dumps(publishable.json_document(published), indent=2, default=str))
        else:
            from rich.console import Console

            self.status = Console(emoji=False)
            render(self.status, result)
        return published


def render(console: Console, result: DriftReport) -> None:
    """What drifts, where, and why either side refused (the verdict line follows it). Values as a person
    writes them (``–``, yes/no); ``--json`` keeps them raw.

    Every column folds (never "…"): a value that does not fit at 80 columns goes on to the next line.
    """
    from rich.table import Table

    from kvdoctor.report.units import human

    engine = result.engine
    console.print(
        safe(f"kvdoctor rules vs SGLang {engine.version} ({engine.path or 'path unknown'}), GPU {result.gpu_arch}"),
        highlight=False,
        soft_wrap=True,
    )
    for r in result.drifting:
        # One small table per drifting cell (three columns fit 80 columns without cutting a value).
        table = Table(title=safe(f"{r.model} · {r.case}"), title_justify="left")
        for col in ("field", "kvdoctor", "SGLang"):
            table.add_column(col, overflow="fold")
        for d in r.drift:
            table.add_row(safe(d.field), safe(human(d.kvdoctor)), safe(human(d.sglang)))
        console.print(table)
        for who, why in (("kvdoctor", r.kvdoctor_refusal), ("SGLang", r.sglang_refusal)):
            if why:
                console.print(f"{who} refuses: {safe(why)}", highlight=False)
