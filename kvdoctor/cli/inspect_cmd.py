"""``kvdoctor inspect``: parse, analyse (pure core, no torch), render, exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from kvdoctor.cli.errors import exit_on_error
from kvdoctor.cli.launch import launch_line
from kvdoctor.cli.options import GpuArchOption
from kvdoctor.engines import Engine, GpuArch, Server


def inspect(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="config.json path, model directory, bundled fixture or cached Hub id."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when any error-severity hazard is found."),
    request_tokens: int = typer.Option(2048, "--request-tokens", min=1, help="Tokens per request (forecast)."),
    concurrent: int = typer.Option(128, "--concurrent", min=1, help="Requests in flight for the retraction forecast."),
    junit_path: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML: one case per hazard.")] = None,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            help="Who answers: kvdoctor's rule model alone, or also the installed SGLang, shown beside it.",
        ),
    ] = Engine.KVDOCTOR,
    gpu_arch: GpuArchOption = GpuArch.SM100,
    server: Annotated[
        Server,
        typer.Option(
            "--server",
            help="Which server the flags are for: sglang (default) or vllm (vLLM 0.33 flags and groups).",
        ),
    ] = Server.SGLANG,
) -> None:
    """Which state a model carries, where it lives, and how SGLang backs it up at retraction.

    Any SGLang server flag (e.g. --kv-cache-dtype mxfp8 --disaggregation-mode decode) may follow MODEL,
    or paste a whole launch line after `--` (python -m sglang.launch_server --model-path X ...).
    An option that is neither kvdoctor's nor SGLang's is refused (exit 2) with a did-you-mean.
    """
    if server is Server.VLLM or engine is Engine.VLLM:  # vLLM's flags, rules and engine: kvdoctor/cli/inspect_vllm.py
        from kvdoctor.cli.inspect_vllm import inspect_vllm

        return inspect_vllm(
            ctx, model, server=server, engine=engine, json_output=json_output, strict=strict, junit_path=junit_path
        )
    from kvdoctor.core.analysis import analyze
    from kvdoctor.core.report import inspect_report

    with exit_on_error():
        from kvdoctor.report.preflight import check_outputs

        check_outputs(junit_path=junit_path)  # before any work: a red verdict must not end as exit 2
        line = launch_line(ctx, model)
        model = line.model
        if engine is Engine.SGLANG:
            report, failed = _with_sglang(model, list(line.server_argv), gpu_arch, request_tokens, concurrent)
        else:
            analysis = analyze(model, line.server_argv, platform=gpu_arch.platform())
            report = inspect_report(analysis, request_tokens, concurrent)
            failed = analysis.worst_severity == "error"
    if json_output:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        from kvdoctor.cli.render_inspect import render

        if "components" in report:
            render(report)
        if "sglang" in report:
            from kvdoctor.cli.render_engine import render_beside

            render_beside(report)
    from kvdoctor.report import verdicts

    with exit_on_error():  # a failure in JUnit and the summary exactly when the exit code says so
        rows = verdicts.inspect_rows(report, gated=strict)
        summary = verdicts.summary(f"kvdoctor inspect {model}", not (strict and failed), rows)
        verdicts.publish(
            "kvdoctor.inspect", verdicts.inspect_cases(report, gated=strict), summary, junit_path=junit_path
        )
    if strict and failed:
        raise typer.Exit(1)


def _with_sglang(model: str, argv: list[str], arch: GpuArch, request_tokens: int, concurrent: int):
    """kvdoctor's report, SGLang's live answers beside it, and a KVD015 hazard per disagreement."""
    from kvdoctor._exceptions import InputError
    from kvdoctor.core.analysis import analyze
    from kvdoctor.core.report import inspect_report
    from kvdoctor.engines.sglang.inspect import beside

    try:
        analysis = analyze(model, argv, platform=arch.platform())
    except InputError as exc:  # kvdoctor refuses; SGLang may still answer, and the refusal is drift
        answers = beside(None, model, argv, arch, kvdoctor_refusal=str(exc))
        report = {
            "model": {"source": model},
            "hazards": answers.hazards(),
            "engine": answers.live.info.to_json(),
            "sglang": answers.to_json(),
            "rules_revision": None,
        }
        return report, bool(answers.drifts)
    answers = beside(analysis, model, argv, arch)
    report = inspect_report(analysis, request_tokens, concurrent)
    report["hazards"] = [*report["hazards"], *answers.hazards()]
    report["engine"] = answers.live.info.to_json()
    report["sglang"] = answers.to_json()
    return report, analysis.worst_severity == "error" or bool(answers.drifts)
