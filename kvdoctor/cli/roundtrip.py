"""``kvdoctor roundtrip``: run SGLang's retraction protocol on real pools and diff every byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kvdoctor.cli.errors import exit_on_error
from kvdoctor.cli.launch import launch_line
from kvdoctor.cli.options import GpuArchOption
from kvdoctor.cli.progress import with_progress
from kvdoctor.cli.text import safe
from kvdoctor.cli.units import format_bytes
from kvdoctor.engines import Engine, GpuArch


def _where(row: dict[str, Any]) -> str:
    if row.get("first_plane") is None:
        return ""
    rid = row.get("first_request")
    who = "padding" if rid is None else f"req {rid}"
    return (
        f"{who}, {row['first_plane']}, layer {row['first_layer']}, "
        f"pos {row['first_position']}, slot {row['first_slot']}"
    )


def render(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(emoji=False)
    used = report["used"]
    engine = report.get("engine") or {}
    who = f"engine {engine['name']} {engine['version']}" if engine.get("version") else "engine kvdoctor"
    console.print(
        "[bold]kvdoctor roundtrip[/] "
        + safe(
            f"{used['model']} | {who} | kv {report['kv_cache_dtype']} | backend "
            f"{report['backend']} | {report['device']} | injected: "
            f"{report['injected'] or 'none'}"
        ),
        highlight=False,
    )
    verdict = "[bold green]OK[/]" if report["ok"] else "[bold red]DIFFERS[/]"
    table = Table(title=f"Round trip {verdict}", title_justify="left")
    for col in ("component", "bytes", "differ", "out/in", "ledger", "verdict"):
        table.add_column(col, no_wrap=True)
    for row in report["components"]:
        mark = "[green]equal[/]" if row["ok"] else "[bold red]RED[/]"
        ledger = "ok" if row["ledger_ok"] else "[red]BAD[/]"
        table.add_row(
            safe(row["name"]),
            format_bytes(row["bytes"]),
            f"{row['mismatched_bytes']:,}",
            f"{row['copies_out']}/{row['copies_in']}",
            ledger,
            mark,
        )
    console.print(table)
    if (report.get("engine") or {}).get("name") == "sglang":
        _render_engine_used(console, report)
    else:
        _render_model_used(console, report)
    for row in report["components"]:
        if not row["ok"]:
            console.print(f"[red]{safe(row['name'])}[/]: {safe(_why(row))}", highlight=False)
    for hazard in report.get("hazards", []):
        console.print(
            f"[bold red]{safe(hazard['code'])}[/] ({safe(hazard['severity'])}): {safe(hazard['message'])} "
            "SGLang would refuse this launch line; the round trip above tests the pool's copy path only.",
            highlight=False,
        )
    mismatch = inject_mismatch(report)
    if mismatch:
        console.print(f"[bold yellow]injected fault mismatch:[/] {safe(mismatch)}", highlight=False)
    if not report["ok"]:
        console.print(f"[bold red]verdict: red[/] — differs: {safe(', '.join(report['failing']))}")


def _render_model_used(console: Any, report: dict[str, Any]) -> None:
    used = report["used"]
    console.print(
        safe(
            f"used: {used['requests']} requests ({used['retracted']} retracted) up to {used['max_tokens']} tokens, "
            f"page {used['page_size']}, seed {used['seed']}; layers full/swa/recurrent "
            f"{used['full_layers']}/{used['swa_layers']}/{used['recurrent_layers']}, KV heads {used['kv_heads']}, "
            f"window {used['sliding_window']}; reductions: {used['reductions']}; pool {used['kv_pool']} "
            f"(cpu_copy_carries_mamba={used['cpu_copy_carries_mamba']}); scales: {used['scale_layout'] or '-'}; "
            f"{format_bytes(used['pool_bytes'])} of pools; {report['elapsed_s']} s"
        ),
        highlight=False,
    )


def _render_engine_used(console: Any, report: dict[str, Any]) -> None:
    """What SGLang built and ran, what kvdoctor supplied, and every stub, one fact per line."""
    used, engine = report["used"], report["engine"]
    classes = ", ".join(f"{k} {v}" for k, v in used["pool_classes"].items())
    lines = [
        f"SGLang {engine['version']} from {engine['path']}",
        f"pools (built by SGLang's KVCacheConfigurator): {classes}",
        f"cpu_copy_carries_mamba: {'yes' if used['cpu_copy_carries_mamba'] else 'no'}; backup "
        f"{report['backend']} ({used['backend_source']})",
        f"run: {used['requests']} requests ({used['retracted']} retracted) up to {used['max_tokens']} tokens, "
        f"page {used['page_size']}, seed {used['seed']}, {used['pool_tokens']} pool tokens, "
        f"{report['elapsed_s']} s",
        f"data: {used['data']}",
        f"admission: {used['admission']}",
        *(f"stub: {stub}" for stub in used["stubs"]),
        *(f"note: {note}" for note in used["notes"]),
    ]
    for line in lines:
        console.print(safe(line), highlight=False)


def _why(row: dict[str, Any]) -> str:
    if row["name"] == "backup_aliasing":
        return (
            f"the backup of {row['first_plane']} for req {row['first_request']} is a view of the live pool, "
            "not a copy: its bytes are lost as soon as another request reuses the slot"
        )
    if row["name"] == "slot_reuse" and row.get("first_request") is None:
        return "no restored slot was captured: nothing shows the restore landed in fresh slots"
    if row["name"] == "slot_reuse":
        return (
            f"req {row['first_request']} was restored into slot {row['first_slot']} of {row['first_plane']}, "
            "a slot it held before retraction: the round trip proves nothing about reuse"
        )
    why = "first mismatch " + (_where(row) or "bytes agree")
    if not row["ledger_ok"]:
        why += f"; ledger: copied out {row['copies_out']}x, in {row['copies_in']}x per request"
    return why


def inject_mismatch(report: dict[str, Any]) -> str | None:
    """A sentence when --inject broke something other than (or more than) what the fault targets."""
    if report.get("inject_matched") is not False:
        return None
    expected, failing = set(report["expected_red"]), set(report["failing"])
    parts = [f"--inject {report['injected']} should turn red exactly {', '.join(sorted(expected)) or 'nothing'}"]
    if failing - expected:
        parts.append(f"but also broke {', '.join(sorted(failing - expected))}")
    if expected - failing:
        parts.append(f"and left {', '.join(sorted(expected - failing))} green (the fault went undetected there)")
    return "; ".join(parts)


def roundtrip(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="config.json path, model directory, bundled fixture or cached Hub id."),
    device: str = typer.Option("auto", "--device", help="auto (CUDA when available), cpu or cuda."),
    requests: int = typer.Option(8, "--requests", min=2, help="Requests admitted; half are retracted."),
    tokens: int = typer.Option(256, "--tokens", min=2, help="Longest request (seqlen); lengths vary down to half."),
    seed: int = typer.Option(0, "--seed", help="Seed for lengths, retracted set and data."),
    inject: str | None = typer.Option(
        None,
        "--inject",
        help="Reproduce a known failure: missing-mamba, double-mamba, drop-block-scale, drop-swa, "
        "host-pool-on-ssm, restore-order, clobber-padding.",
    ),
    layers: int | None = typer.Option(None, "--layers", min=1, help="Reduce: at most N layers per sub-pool."),
    heads: int | None = typer.Option(None, "--heads", min=1, help="Reduce: at most N KV / recurrent heads."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    junit_path: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML: one case per component.")] = None,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            help="Whose pools and retraction code run: kvdoctor's model of SGLang, or the installed SGLang itself.",
        ),
    ] = Engine.KVDOCTOR,
    gpu_arch: GpuArchOption = GpuArch.SM100,
    emulate_d2h: bool = typer.Option(
        False,
        "--emulate-d2h",
        help="--engine sglang: copy backup tensors that alias a live pool, as a device-to-host copy would "
        "(the aliasing row then reports without failing). Never the default.",
    ),
) -> None:
    """Retract requests, let others reuse their slots, restore, and diff every state component bitwise.

    Any SGLang server flag (e.g. --kv-cache-dtype mxfp8 --disaggregation-mode decode) may follow MODEL.
    With --engine sglang the installed SGLang builds the pools and runs backup_kv_cache/restore_kv_cache.
    Exit 0 when everything matches, 1 when anything differs, 2 on bad input.
    """
    with exit_on_error():
        from kvdoctor.report.preflight import check_outputs

        check_outputs(junit_path=junit_path)  # before any work: a red verdict must not end as exit 2
        from kvdoctor.core.analysis import analyze
        from kvdoctor.state.pools import Reductions
        from kvdoctor.state.run import RoundtripOptions, check_run, run_roundtrip

        line = launch_line(ctx, model)
        model = line.model
        options = RoundtripOptions(
            device=device,
            requests=requests,
            tokens=tokens,
            seed=seed,
            inject=inject,
            reductions=Reductions(layers=layers, heads=heads),
        )
        if engine is Engine.SGLANG:
            result = _run_engine(model, list(line.server_argv), options, gpu_arch, emulate_d2h, json_output)
        else:
            analysis = analyze(model, line.server_argv, platform=gpu_arch.platform())
            check_run(analysis, options)  # bad input (memory budget included) refused before any output
            if json_output:
                result = run_roundtrip(analysis, options)
            else:
                result = with_progress(lambda update: run_roundtrip(analysis, options, update), "round trip")
    report = result.to_json()
    if json_output:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        render(report)
    from kvdoctor.report import verdicts

    with exit_on_error():
        summary = verdicts.summary(f"kvdoctor roundtrip {model}", result.ok, verdicts.roundtrip_rows(report))
        verdicts.publish("kvdoctor.roundtrip", verdicts.roundtrip_cases(report), summary, junit_path=junit_path)
    if not result.ok:
        raise typer.Exit(1)


def _run_engine(model: str, argv: list[str], options: Any, arch: GpuArch, emulate_d2h: bool, quiet: bool) -> Any:
    """The round trip on the installed SGLang (imported here, never at CLI start-up)."""
    from kvdoctor.engines.sglang.roundtrip import EngineOptions, run_roundtrip

    engine = EngineOptions(arch=arch, emulate_d2h=emulate_d2h)
    if quiet:
        return run_roundtrip(model, argv, options, engine)
    return with_progress(lambda update: run_roundtrip(model, argv, options, engine, update), "import SGLang")
