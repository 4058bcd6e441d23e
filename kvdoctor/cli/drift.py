"""``kvdoctor drift``: kvdoctor's rules against the installed SGLang over every fixture x a launch matrix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kvdoctor.cli.errors import exit_on_error
from kvdoctor.cli.options import GpuArchOption
from kvdoctor.cli.progress import with_progress
from kvdoctor.cli.text import safe
from kvdoctor.engines import GpuArch


def drift(
    fixture: Annotated[
        list[str] | None, typer.Option("--fixture", help="Only this bundled fixture (repeatable).")
    ] = None,
    case: Annotated[list[str] | None, typer.Option("--case", help="Only this launch case (repeatable).")] = None,
    gpu_arch: GpuArchOption = GpuArch.SM100,
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
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
        from kvdoctor.engines.sglang.drift import run_drift

        if json_output:
            result = run_drift(fixture or (), case or (), gpu_arch)
        else:
            result = with_progress(
                lambda update: run_drift(fixture or (), case or (), gpu_arch, update), "import SGLang"
            )
    report = result.to_json()
    if json_output:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        render(report)
    from kvdoctor.report import junit, verdicts

    with exit_on_error():
        cases = [
            junit.Case(
                f"{r['model']} · {r['case']}",
                junit.PASSED if r["ok"] else junit.FAILED,
                message="; ".join(_drift_line(d) for d in r["drift"]),
            )
            for r in report["results"]
        ]
        rows = [
            verdicts.github.Row(
                "drifting cases", str(report["drifting_cases"]), "0", junit.PASSED if result.ok else junit.FAILED
            )
        ]
        summary = verdicts.summary("kvdoctor drift", result.ok, rows)
        verdicts.publish("kvdoctor.drift", cases, summary, junit_path=junit_path)
    if not result.ok:
        raise typer.Exit(1)


def _drift_line(d: dict[str, Any]) -> str:
    return f"{d['field']}: kvdoctor {d['kvdoctor']!r}, SGLang {d['sglang']!r}"


def render(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(emoji=False)
    engine = report["engine"]
    bad = [r for r in report["results"] if not r["ok"]]
    table = Table(title=safe(f"kvdoctor rules vs SGLang {engine['version']} ({engine['path']})"), title_justify="left")
    for col in ("model", "case", "field", "kvdoctor", "SGLang"):
        table.add_column(col, overflow="fold")
    for r in bad:
        for d in r["drift"]:
            table.add_row(
                safe(r["model"]), safe(r["case"]), safe(d["field"]), safe(str(d["kvdoctor"])), safe(str(d["sglang"]))
            )
    if bad:
        console.print(table)
        for r in bad:
            for who, why in (("kvdoctor", r["kvdoctor_refusal"]), ("SGLang", r["sglang_refusal"])):
                if why:
                    console.print(
                        f"{safe(r['model'])} · {safe(r['case'])}: {who} refuses: {safe(why)}", highlight=False
                    )
    verdict = "[bold red]drift[/]" if bad else "[green]no drift[/]"
    console.print(
        f"verdict: {verdict}: {report['cases']} cases, {report['fields_compared']} fields compared, "
        f"{report['drifting_cases']} drifting, {report['elapsed_s']} s",
        highlight=False,
    )
