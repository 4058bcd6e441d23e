"""``kvdoctor drift``: kvdoctor's rules against the installed server over every fixture x a launch matrix.

``--server sglang`` (the default) holds kvdoctor's SGLang rules to the installed SGLang
(``kvdoctor.engines.sglang.drift``); ``--server vllm`` holds its vLLM rules to the installed vLLM
(``kvdoctor.engines.vllm.drift``, the matrix in ``kvdoctor.core.vllm.matrix``). Each server's side is its API
room's (``kvdoctor.api._servers``), its title and rules from its facts (``kvdoctor.core.servers``).
One typed result (:class:`~kvdoctor.core.drift_result.DriftReport`) feeds every output through its
:class:`~kvdoctor.report.drift_report.Report`: ``--json`` (the shared header, then the report's own
keys; ``kvdoctor schema drift``), the table, JUnit (one case per matrix cell) and the step summary. A cell
fails in JUnit exactly when it drifts, and the command exits 1 exactly when one does, so the CI file and
the exit code cannot disagree. A cell where the server's own code failed is an error (JUnit ``<error>``, one line
under the tables): with no drift the run exits 3, its verdict line naming the server's error and where. Its reports
are written first, then its output (the steps of
``kvdoctor.cli.command``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from kvdoctor.api._drift import DriftArgs, DriftJob
from kvdoctor.cli.command import CommandRun
from kvdoctor.cli.progress import with_progress
from kvdoctor.cli.typed_command import command, shown_option
from kvdoctor.core.drift_result import server_answer
from kvdoctor.core.servers import facts
from kvdoctor.report import reportable
from kvdoctor.report.drift_report import architectures_of, cells_named, refusal_lines
from kvdoctor.report.units import human
from kvdoctor.text import safe

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.core.drift_result import DriftReport
    from kvdoctor.report.drift_report import Report

T = TypeVar("T")


def _drift(ctx: typer.Context, args: DriftArgs, *, json_output: bool) -> None:
    source = ctx.get_parameter_source("gpu_arch")  # click's ParameterSource (Typer may vendor click: by name)
    DriftRun(args, explicit_arch=source is not None and source.name != "DEFAULT", json_output=json_output)()


drift = command(
    DriftArgs,
    _drift,
    name="drift",
    doc="""Compare kvdoctor's frozen rules with the installed server on every fixture x launch case.

    Needs the server importable: SGLang (make sglang-env; run .venv-sglang/bin/kvdoctor drift) or, with
    --server vllm, vLLM (make vllm-env; run .venv-vllm/bin/kvdoctor drift --server vllm). Exit 0 when every
    field agrees, 1 on any drift, 2 on bad input, 3 when the server's own code failed in a case (no answer: never
    counted as drift).
    """,
    shown=(
        shown_option(
            "json_output", "--json", help="Print one JSON object instead of tables (schema: kvdoctor schema drift)."
        ),
    ),
    before="junit_path",
)


class DriftRun(DriftJob, CommandRun["DriftReport", "Report"]):
    """One ``kvdoctor drift``: :class:`kvdoctor.api.DriftJob`'s steps (``kvdoctor.cli.command``), a progress bar
    unless ``--json``; JUnit and the summary, then the output."""

    def __init__(self, *args: Any, json_output: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.json_output = json_output

    def watched(self, work: Callable[[Any], T], first_step: str) -> T:
        return work(None) if self.json_output else with_progress(work, first_step)

    def deliver(self, result: DriftReport) -> Report:
        published = self.report(result)
        self.publish(published)
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
    render_errors(console, result)
    render_architectures(console, result)


def render_errors(console: Console, result: DriftReport) -> None:
    """The cells where the server's own code failed, one line per distinct failure (never a drift table):
    ``error inside vLLM in 429 of 429 cases (deepseek-v3 · base, … and 424 more): RuntimeError: … at vllm/…:243``."""

    for error, _count in result.errors():
        cells = [r for r in result.errored if str(getattr(r, "error", "")) == error]
        where = f"{len(cells)} of {result.cases} cases ({cells_named(cells)})"
        line = f"error inside {result.server_title} in {where}: {error}"
        console.print(safe(line), highlight=False, soft_wrap=True)


def render_architectures(console: Console, result: DriftReport) -> None:
    """``--all-architectures``: one row per generated model type, then what was skipped and why."""
    from rich.table import Table

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
