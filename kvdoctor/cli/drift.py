"""``kvdoctor drift``: kvdoctor's rules against the installed SGLang over every fixture x a launch matrix.

One typed result (:class:`~kvdoctor.engines.sglang.drift.DriftReport`) feeds every output: ``--json``
(the shared header, then the report's own keys; ``kvdoctor schema drift``), the table, JUnit (one case
per matrix cell) and the step summary. A cell fails in JUnit exactly when it drifts, and the command
exits 1 exactly when one does, so the CI file and the exit code cannot disagree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvdoctor.cli.errors import exit_on_error
from kvdoctor.cli.options import GpuArchOption
from kvdoctor.cli.progress import with_progress
from kvdoctor.cli.text import safe
from kvdoctor.engines import GpuArch

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.engines.sglang.drift import DriftReport
    from kvdoctor.engines.sglang.inspect import Drift
    from kvdoctor.report.envelope import RunHeader

EXIT_DRIFT = 1


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
    with exit_on_error():
        from kvdoctor.report.preflight import check_outputs

        check_outputs(junit_path=junit_path)
        from kvdoctor.report.verdicts import errors_published

        with errors_published("kvdoctor.drift", "kvdoctor drift", junit_path=junit_path):
            from kvdoctor.engines.sglang.drift import run_drift

            if json_output:
                result = run_drift(fixture or (), case or (), gpu_arch)
            else:
                result = with_progress(
                    lambda update: run_drift(fixture or (), case or (), gpu_arch, update), "import SGLang"
                )
    exit_code = 0 if result.ok else EXIT_DRIFT
    with exit_on_error():
        _publish(result, junit_path)
        head = run_header(result, exit_code)
        if json_output:
            from kvdoctor.report.envelope import document

            typer.echo(json.dumps(document(head, result), indent=2, default=str))
        else:
            from rich.console import Console

            render(Console(emoji=False), result, head)
    if exit_code:
        raise typer.Exit(exit_code)


def run_header(result: DriftReport, exit_code: int) -> RunHeader:
    """The shared header: the engine is the installed SGLang compared against; the rules are kvdoctor's."""
    from kvdoctor.core.sglang.rules import RULES_REVISION
    from kvdoctor.report.envelope import EngineRef, header

    engine = EngineRef("sglang", result.engine.version, result.engine.path)
    return header("drift", exit_code=exit_code, engine=engine, rules_revision=RULES_REVISION, argv_fallback=("drift",))


def drift_line(d: Drift) -> str:
    """One disagreement in words (JUnit message); raw ``repr`` so a string and a number stay apart."""
    return f"{d.field}: kvdoctor {d.kvdoctor!r}, SGLang {d.sglang!r}"


def _publish(result: DriftReport, junit_path: Path | None) -> None:
    from kvdoctor.report import github, junit, verdicts
    from kvdoctor.report.envelope import Verdict

    cases = [
        junit.Case(
            f"{r.model} · {r.case}",
            junit.PASSED if r.ok else junit.FAILED,
            message="; ".join(drift_line(d) for d in r.drift),
            time_s=r.seconds,
        )
        for r in result.results
    ]
    rows = [
        github.Row("drifting cases", str(result.drifting_cases), "0", junit.PASSED if result.ok else junit.FAILED),
        *(
            github.Row(f"{r.model} · {r.case}", ", ".join(d.field for d in r.drift), "no drift", junit.FAILED)
            for r in result.drifting
        ),
    ]
    summary = verdicts.summary("kvdoctor drift", Verdict.of(0 if result.ok else 1), rows)
    verdicts.publish("kvdoctor.drift", cases, summary, junit_path=junit_path)


def verdict_detail(result: DriftReport) -> str:
    from kvdoctor.report.units import human

    counts = (
        f"{human(result.cases)} cases, {human(result.fields_compared)} fields compared, "
        f"{human(result.drifting_cases)} drifting, {result.elapsed_s:.1f} s"
    )
    if result.ok:
        return counts
    names = ", ".join(f"{r.model} · {r.case}" for r in result.drifting[:5])
    more = f" and {len(result.drifting) - 5} more" if len(result.drifting) > 5 else ""
    return f"{counts}: {names}{more}"


def render(console: Console, result: DriftReport, head: RunHeader) -> None:
    """What drifts, where, and why either side refused; then the one verdict line. Values as a person
    writes them (``–``, yes/no); ``--json`` keeps them raw.

    Every column folds (never "…"): a value that does not fit at 80 columns goes on to the next line.
    """
    from rich.table import Table

    from kvdoctor.cli.verdict import print_verdict
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
    print_verdict(console, head.verdict, verdict_detail(result))
