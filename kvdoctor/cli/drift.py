"""``kvdoctor drift``: kvdoctor's rules against the installed server over every fixture x a launch matrix.

``--server sglang`` (the default) holds kvdoctor's SGLang rules to the installed SGLang
(``kvdoctor.engines.sglang.drift``); ``--server vllm`` holds its vLLM rules to the installed vLLM
(``kvdoctor.engines.vllm.drift``, the matrix in ``kvdoctor.core.vllm.matrix``). Each server's side is one line
of :data:`SIDES` (``kvdoctor/cli/drift_sides.py``), its title and rules from its facts (``kvdoctor.core.servers``).
One typed result (:class:`~kvdoctor.core.drift_result.DriftReport`) feeds every output through its
:class:`~kvdoctor.report.drift_report.Report`: ``--json`` (the shared header, then the report's own
keys; ``kvdoctor schema drift``), the table, JUnit (one case per matrix cell) and the step summary. A cell
fails in JUnit exactly when it drifts, and the command exits 1 exactly when one does, so the CI file and
the exit code cannot disagree. Its reports are written first, then its output (the steps of
``kvdoctor.cli.command``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvdoctor._exceptions import InputError
from kvdoctor.cli.command import CommandRun, ErrorCase, check_reports
from kvdoctor.cli.options import GpuArchOption
from kvdoctor.cli.progress import with_progress
from kvdoctor.core.servers import DEFAULT_SERVER, facts, lookup
from kvdoctor.engines import GpuArch, Server
from kvdoctor.text import safe

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.cli.drift_sides import DriftSide
    from kvdoctor.core.drift_result import DriftReport
    from kvdoctor.report.drift_report import Report

Progress = Callable[[str, int, int], None]

# One line per server: what ``drift --server S`` holds the rules against (its engine, its generated set).
SIDES: dict[str, str] = {
    "sglang": "kvdoctor.cli.drift_sides:SGLANG",
    "vllm": "kvdoctor.cli.drift_sides:VLLM",
}


def drift(
    ctx: typer.Context,
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
    server: Annotated[
        Server,
        typer.Option(
            "--server",
            help="Whose rules and code: sglang (default) or vllm (kvdoctor's vLLM rules against the installed vLLM).",
        ),
    ] = DEFAULT_SERVER,
    all_architectures: bool = typer.Option(
        False,
        "--all-architectures",
        help="Instead of the fixtures: a config for every model type SGLang's registry serves, from its config "
        "class's defaults, under a 4-case matrix (docs/drift.md). Drift there is reported (exit 0) unless --strict.",
    ),
    model_type: Annotated[
        list[str] | None,
        typer.Option("--model-type", help="With --all-architectures: only this model type (repeatable)."),
    ] = None,
    output_dir: Annotated[
        Path | None,
        typer.Option("--output-dir", help="With --all-architectures: keep the generated configs here (new or empty)."),
    ] = None,
    strict: bool = typer.Option(
        False, "--strict", help="With --all-architectures: a drifting generated cell exits 1, as a fixture's does."
    ),
) -> None:
    """Compare kvdoctor's frozen rules with the installed server on every fixture x launch case.

    Needs the server importable: SGLang (make sglang-env; run .venv-sglang/bin/kvdoctor drift) or, with
    --server vllm, vLLM (make vllm-env; run .venv-vllm/bin/kvdoctor drift --server vllm). Exit 0 when every
    field agrees, 1 on any drift, 2 on bad input.
    """
    source = ctx.get_parameter_source("gpu_arch")  # click's ParameterSource (Typer may vendor click: by name)
    explicit_arch = source is not None and source.name != "DEFAULT"
    DriftRun(
        tuple(fixture or ()),
        tuple(case or ()),
        gpu_arch,
        json_output=json_output,
        junit_path=junit_path,
        server=server,
        explicit_arch=explicit_arch,
        architectures=Architectures(all_architectures, tuple(model_type or ()), output_dir, strict),
    )()


@dataclass(frozen=True)
class Architectures:
    """``--all-architectures`` and the options that only mean something with it."""

    on: bool = False
    model_types: tuple[str, ...] = ()
    output_dir: Path | None = None
    strict: bool = False

    def check(self, fixtures: tuple[str, ...], server: Server) -> None:
        if not self.on:
            given = [
                name
                for name, value in (
                    ("--model-type", self.model_types),
                    ("--output-dir", self.output_dir),
                    ("--strict", self.strict),
                )
                if value
            ]
            if given:
                raise InputError(f"{', '.join(given)} only mean(s) something with --all-architectures")
            return
        if fixtures:
            raise InputError("--all-architectures generates its own configs; it cannot be combined with --fixture")
        out = self.output_dir
        if out is not None and out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise InputError(f"--output-dir {out} exists and is not an empty directory (nothing is overwritten)")


class DriftRun(CommandRun["DriftReport", "Report"]):
    """One ``kvdoctor drift`` (the steps of ``kvdoctor.cli.command``): JUnit and the summary, then the output."""

    def __init__(
        self,
        fixtures: tuple[str, ...],
        cases: tuple[str, ...],
        gpu_arch: GpuArch,
        *,
        json_output: bool,
        junit_path: Path | None,
        server: Server = DEFAULT_SERVER,
        explicit_arch: bool = False,
        architectures: Architectures | None = None,
    ) -> None:
        self.fixtures, self.cases, self.gpu_arch = fixtures, cases, gpu_arch
        self.json_output, self.junit_path = json_output, junit_path
        self.server, self.explicit_arch = server, explicit_arch
        self.architectures = architectures or Architectures()

    def check(self) -> None:
        told = facts(self.server)
        if self.explicit_arch and not told.platform:  # silently ignored, the user would think it was used
            raise InputError(
                f"--gpu-arch is the platform SGLang is told; drift --server {told.name} compares answers that take none"
            )
        self.architectures.check(self.fixtures, self.server)

    def preflight(self) -> None:
        check_reports(self.junit_path)

    def error_case(self) -> ErrorCase:
        from kvdoctor.report.drift_report import SUITE, TITLE

        return ErrorCase(SUITE, TITLE, self.junit_path)

    def work(self) -> DriftReport:
        side: DriftSide = lookup(SIDES, self.server, "drift side")
        adapter = side.adapter()  # the installed server is the other side (exit 2 when it cannot drift)
        if self.architectures.on:
            return self._all_architectures(side, adapter.title)
        if self.json_output:
            return adapter.drift(self.fixtures, self.cases, self.gpu_arch, None)
        return with_progress(
            lambda update: adapter.drift(self.fixtures, self.cases, self.gpu_arch, update), f"import {adapter.title}"
        )

    def _all_architectures(self, side: DriftSide, title: str) -> DriftReport:
        chosen = self.architectures

        def run(update: Progress | None) -> DriftReport:
            return side.all_architectures(
                self.cases,
                self.gpu_arch,
                update,
                output_dir=chosen.output_dir,
                model_types=chosen.model_types,
                strict=chosen.strict,
            )

        if self.json_output:
            return run(None)
        return with_progress(run, f"import {title}")

    def deliver(self, result: DriftReport) -> Report:
        from kvdoctor.report import reportable
        from kvdoctor.report.drift_report import Report

        published = Report(result)
        reportable.publish(published, junit_path=self.junit_path)
        if self.json_output:
            typer.echo(json.dumps(reportable.json_document(published), indent=2, default=str))
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

    from kvdoctor.core.drift_result import server_answer
    from kvdoctor.report.drift_report import refusal_lines
    from kvdoctor.report.units import human

    engine, title, server = result.engine, facts(result.server).title, result.server
    platform = f", GPU {result.gpu_arch}" if result.gpu_arch else ""
    console.print(
        safe(f"kvdoctor rules vs {title} {engine.version} ({engine.path or 'path unknown'}){platform}"),
        highlight=False,
        soft_wrap=True,
    )
    for r in result.drifting:
        # One small table per drifting cell (three columns fit 80 columns without cutting a value).
        table = Table(title=safe(f"{r.model} · {r.case}"), title_justify="left")
        for col in ("field", "kvdoctor", title):
            table.add_column(col, overflow="fold")
        for d in r.drift:
            table.add_row(safe(d.field), safe(human(d.kvdoctor)), safe(human(server_answer(d, server))))
        console.print(table)
        for line in refusal_lines(r, server):
            console.print(safe(line), highlight=False)
    render_architectures(console, result)


def render_architectures(console: Console, result: DriftReport) -> None:
    """``--all-architectures``: one row per generated model type, then what was skipped and why."""
    from rich.table import Table

    from kvdoctor.report.drift_report import architectures_of

    totals = architectures_of(result)
    if totals is None:
        return
    table = Table(title="generated model types", title_justify="left")
    for col in ("model type", "architecture", "fixture", "cells", "drifting"):
        table.add_column(col, overflow="fold")
    for m in totals.per_model_type:
        row = (m.model_type, m.architecture, "yes" if m.has_fixture else "no", str(m.cells), str(m.drifting_cells))
        table.add_row(*(safe(v) for v in row))
    console.print(table)
    for why, count in totals.skipped_by_reason.items():
        names = ", ".join(t for t, r in totals.skipped_model_types.items() if r == why)
        console.print(safe(f"skipped ({why}): {count}: {names}"), highlight=False, soft_wrap=True)
    if totals.output_dir:
        console.print(safe(f"configs kept in {totals.output_dir}"), highlight=False, soft_wrap=True)
