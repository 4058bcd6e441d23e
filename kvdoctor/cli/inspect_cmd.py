"""``kvdoctor inspect``: parse, analyse (pure core, no torch), render, exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from kvdoctor.cli.errors import exit_on_error
from kvdoctor.cli.launch import launch_line


def inspect(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="config.json path, model directory, bundled fixture or cached Hub id."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when any error-severity hazard is found."),
    request_tokens: int = typer.Option(2048, "--request-tokens", min=1, help="Tokens per request (forecast)."),
    concurrent: int = typer.Option(128, "--concurrent", min=1, help="Requests in flight for the retraction forecast."),
    junit_path: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML: one case per hazard.")] = None,
) -> None:
    """Which state a model carries, where it lives, and how SGLang backs it up at retraction.

    Any SGLang server flag (e.g. --kv-cache-dtype mxfp8 --disaggregation-mode decode) may follow MODEL,
    or paste a whole launch line after `--` (python -m sglang.launch_server --model-path X ...).
    An option that is neither kvdoctor's nor SGLang's is refused (exit 2) with a did-you-mean.
    """
    from kvdoctor.core.analysis import analyze
    from kvdoctor.core.report import inspect_report

    with exit_on_error():
        from kvdoctor.report.preflight import check_outputs

        check_outputs(junit_path=junit_path)  # before any work: a red verdict must not end as exit 2
        line = launch_line(ctx, model)
        model = line.model
        analysis = analyze(model, line.server_argv)
        report = inspect_report(analysis, request_tokens, concurrent)
    if json_output:
        typer.echo(json.dumps(report, indent=2))
    else:
        from kvdoctor.cli.render_inspect import render

        render(report)
    from kvdoctor.report import verdicts

    failed = analysis.worst_severity == "error"
    with exit_on_error():
        summary = verdicts.summary(f"kvdoctor inspect {model}", not failed, verdicts.inspect_rows(report))
        verdicts.publish("kvdoctor.inspect", verdicts.inspect_cases(report), summary, junit_path=junit_path)
    if strict and failed:
        raise typer.Exit(1)
