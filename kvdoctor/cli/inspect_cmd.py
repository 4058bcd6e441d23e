"""``kvdoctor inspect``: parse, analyse (pure core, no torch), render, exit code."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from kvdoctor.cli.errors import exit_on_error
from kvdoctor.cli.launch import launch_line
from kvdoctor.cli.options import GpuArchOption
from kvdoctor.engines import Engine, GpuArch, Server
from kvdoctor.report.envelope import EngineRef, Verdict


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
    from kvdoctor.core.sglang.analysis import analyze
    from kvdoctor.core.sglang.inspect_result import inspect_report

    with exit_on_error():
        from kvdoctor.report.preflight import check_outputs

        check_outputs(junit_path=junit_path)  # before any work: a red verdict must not end as exit 2
        from kvdoctor.report.verdicts import errors_published

        with errors_published("kvdoctor.inspect", f"kvdoctor inspect {model}", junit_path=junit_path):
            line = launch_line(ctx, model)
            model = line.model
            if engine is Engine.SGLANG:
                run = _with_sglang(model, list(line.server_argv), gpu_arch, request_tokens, concurrent)
            else:
                analysis = analyze(model, line.server_argv, platform=gpu_arch.platform())
                run = Run(inspect_report(analysis, request_tokens, concurrent), None, 0)
    publish_inspect(
        ctx,
        run.report,
        strict=strict,
        json_output=json_output,
        junit_path=junit_path,
        title=f"kvdoctor inspect {model}",
        engine=run.engine,
        drifts=run.drifts,
    )


@dataclass(frozen=True)
class Run:
    """One inspect run's typed result, the engine that answered beside kvdoctor (if any), its drifts."""

    report: Any  # InspectReport | InspectBesideReport | RefusedInspectReport | VllmReport | VllmBesideReport
    engine: EngineRef | None
    drifts: int


def publish_inspect(
    ctx: typer.Context,
    report: Any,
    *,
    strict: bool,
    json_output: bool,
    junit_path: Path | None,
    title: str,
    engine: EngineRef | None,
    drifts: int,
) -> None:
    """Print REPORT (``--json`` document or tables and one verdict line), write JUnit and the step
    summary from the same object, and exit as the verdict says: every mode of ``inspect`` ends here.

    Exit 1 only under ``--strict`` with an error hazard (engine drift is one); otherwise ungated
    hazards are the run's ``warnings`` and the verdict is ``warn``. JUnit and the summary fail exactly
    when the exit code does.
    """
    from kvdoctor.core.sglang.inspect_result import ungated
    from kvdoctor.report import verdicts
    from kvdoctor.report.envelope import document, header

    failed = strict and any(h.severity == "error" for h in report.hazards)
    exit_code = 1 if failed else 0
    warnings = ungated(report.hazards, strict=strict)
    verdict = Verdict.of(exit_code, warnings=len(warnings))  # the last line and the summary say the same word
    if json_output:
        head = header(
            "inspect",
            exit_code=exit_code,
            warnings=warnings,
            engine=engine,
            rules_revision=report.rules_revision,
            argv_fallback=ctx.command_path.split()[1:],
        )
        typer.echo(json.dumps(document(head, report), indent=2))
    else:
        from rich.console import Console

        from kvdoctor.cli.render_inspect import verdict_detail
        from kvdoctor.cli.verdict import print_verdict

        console = Console(emoji=False)
        _render(report, console)
        engine_name = "" if engine is None or engine.name == "kvdoctor" else f"{engine.name} {engine.version}"
        detail = verdict_detail(report.hazards, strict=strict, drifts=drifts, engine=engine_name)
        print_verdict(console, verdict, detail)
    with exit_on_error():  # a failure in JUnit and the summary exactly when the exit code says so
        rows = verdicts.inspect_rows(report, gated=strict)
        summary = verdicts.summary(title, verdict, rows)
        verdicts.publish(
            "kvdoctor.inspect", verdicts.inspect_cases(report, gated=strict), summary, junit_path=junit_path
        )
    if failed:
        raise typer.Exit(1)


def _render(report: Any, console: Any) -> None:
    from kvdoctor.cli import render_inspect
    from kvdoctor.core.sglang.inspect_result import InspectReport
    from kvdoctor.core.vllm.analysis import VllmReport

    if isinstance(report, VllmReport):  # --server vllm: its own tables (kvdoctor/cli/inspect_vllm.py)
        from kvdoctor.cli.inspect_vllm import render

        render(report, console)
        return
    if isinstance(report, InspectReport):
        render_inspect.render(report, console)
    sglang = getattr(report, "sglang", None)
    if sglang is not None:
        from kvdoctor.cli.render_engine import render_beside

        render_beside(sglang, console)
        if not isinstance(report, InspectReport):  # kvdoctor refused: the hazards are SGLang's drift alone
            console.print(render_inspect.hazards_block(report.hazards, console.width))


def _with_sglang(model: str, argv: list[str], arch: GpuArch, request_tokens: int, concurrent: int) -> Run:
    """kvdoctor's result, SGLang's live answers beside it, and a KVD015 hazard per disagreement."""
    from kvdoctor._exceptions import InputError
    from kvdoctor.core.sglang.analysis import analyze
    from kvdoctor.core.sglang.inspect_result import (
        InspectBesideReport,
        ModelSource,
        RefusedInspectReport,
        inspect_report,
    )
    from kvdoctor.engines.sglang.inspect import beside

    try:
        analysis = analyze(model, argv, platform=arch.platform())
    except InputError as exc:  # kvdoctor refuses; SGLang may still answer, and the refusal is drift
        answers = beside(None, model, argv, arch, kvdoctor_refusal=str(exc))
        both = answers.refused_by_both()
        if both is not None:  # both refuse the input: malformed (exit 2), never a report that passes
            raise InputError(f"{exc}; {both}") from None
        refused = RefusedInspectReport(
            model=ModelSource(model), hazards=tuple(answers.hazards()), sglang=answers.answers()
        )
        return Run(refused, _engine_ref(answers), len(answers.drifts))
    answers = beside(analysis, model, argv, arch)
    base = inspect_report(analysis, request_tokens, concurrent)
    fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    fields["hazards"] = (*base.hazards, *answers.hazards())
    return Run(InspectBesideReport(**fields, sglang=answers.answers()), _engine_ref(answers), len(answers.drifts))


def _engine_ref(answers: Any) -> EngineRef:
    info = answers.live.info
    return EngineRef(info.name, info.version, info.path)
