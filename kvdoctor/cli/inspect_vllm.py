"""``kvdoctor inspect MODEL --server vllm [VLLM FLAGS]``: vLLM's specs, groups and connector, as tables or JSON.

The rule model (``kvdoctor.core.vllm``, no torch) always answers. With ``--engine vllm`` the installed
vLLM answers too (``kvdoctor.engines.vllm.inspect``: its own spec classes, ``get_kv_cache_groups`` and
connector classes), shown beside it; every disagreement is a KVD115 drift hazard. When vLLM cannot be
imported the rule model still answers and the report says why vLLM did not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from kvdoctor._exceptions import EngineUnavailable, InputError
from kvdoctor.cli.errors import exit_on_error
from kvdoctor.cli.launch import own_options
from kvdoctor.engines import Engine, Server


def inspect_vllm(
    ctx: typer.Context,
    model: str | None,
    *,
    server: Server,
    engine: Engine,
    json_output: bool,
    strict: bool,
    junit_path: Path | None,
) -> None:
    """Parse the vLLM line, analyse, (ask vLLM), render, publish verdicts, exit code."""
    from kvdoctor.core.vllm.analysis import analyze_vllm_config
    from kvdoctor.core.vllm.flags import parse_vllm_flags, parse_vllm_launch_line

    with exit_on_error():
        if server is not Server.VLLM:
            raise InputError("--engine vllm answers for --server vllm (add --server vllm)")
        if engine not in (Engine.KVDOCTOR, Engine.VLLM):
            raise InputError(f"--engine {engine.value} cannot answer for --server vllm (use --engine vllm)")
        from kvdoctor.report.preflight import check_outputs

        check_outputs(junit_path=junit_path)
        words = [model, *ctx.args] if model is not None else list(ctx.args)
        line = parse_vllm_launch_line(words, own_options=own_options(ctx))
        from kvdoctor.core.config import load_config

        analysis = analyze_vllm_config(load_config(line.model), parse_vllm_flags(line.server_argv))
        report = analysis.to_json()
        failed = analysis.worst_severity == "error"
        if engine is Engine.VLLM:
            failed = _beside_vllm(analysis, report) or failed
    if json_output:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        render(report)
    from kvdoctor.report import github, junit, verdicts

    with exit_on_error():
        rows = [
            github.Row(
                h["code"], h["severity"], h["message"], junit.FAILED if h["severity"] == "error" else junit.PASSED
            )
            for h in report["hazards"]
        ]
        summary = verdicts.summary(f"kvdoctor inspect --server vllm {line.model}", not failed, rows)
        verdicts.publish("kvdoctor.inspect", verdicts.inspect_cases(report), summary, junit_path=junit_path)
    if strict and failed:
        raise typer.Exit(1)


def _beside_vllm(analysis: Any, report: dict[str, Any]) -> bool:
    """vLLM's own answers into REPORT["vllm"]; drift hazards appended. True when they disagree."""
    try:
        from kvdoctor.engines.vllm.inspect import beside

        answers = beside(analysis)
    except EngineUnavailable as exc:  # the rule model answered; say why vLLM did not
        report["vllm"] = {"available": False, "reason": str(exc)}
        print(f"kvdoctor: note: {exc}; kvdoctor's rule model answered alone", file=sys.stderr)
        return False
    report["vllm"] = answers.to_json()
    report["hazards"] = [*report["hazards"], *answers.hazards()]
    return bool(answers.drifts)


# --- rendering (reads only the report dict, so JSON and tables agree) ---


def _fmt(n: int | None) -> str:
    from kvdoctor.cli.units import format_bytes

    return "-" if n is None else format_bytes(n)


def render(r: dict[str, Any], console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    from kvdoctor.cli.render_inspect import SEVERITY_STYLE
    from kvdoctor.cli.text import safe

    console = console or Console(emoji=False)
    m, b = r["model"], r["block_size"]
    t = Table(title="Model (vLLM)", show_header=False, title_justify="left")
    hma = r["hybrid_kv_cache_manager"]
    for key, value in (
        ("architecture", f"{m['architecture']} ({m['model_type']})"),
        ("family", m["family"]),
        ("layers with state", str(m["layers"])),
        ("block size", f"{b['tokens']} tokens: {b['reason']}"),
        ("hybrid KV cache manager", f"{'on' if hma['enabled'] else 'off'}: {hma['reason']}"),
        ("preemption", f"{r['preemption']['mode']}, no backup ({r['preemption']['where']})"),
        ("rules", r["rules_revision"]),
    ):
        t.add_row(key, safe(value))
    console.print(t)
    if r["groups"] is None:
        console.print(safe(f"KV cache groups: vLLM refuses: {r['refusal']['message']} ({r['refusal']['where']})"))
    else:
        g = Table(title="KV cache groups (per TP rank)", title_justify="left")
        for col in ("group", "spec", "layers", "block", "page", "per block", "per token"):
            g.add_column(col)
        for row in r["groups"]:
            layers = f"{len(row['layers'])}" + (f" (+{row['padding_layers']} padding)" if row["padding_layers"] else "")
            per_token = "per request" if row["per_request"] else _fmt(row["bytes_per_token"])
            g.add_row(
                str(row["group"]),
                safe(row["spec"]),
                layers,
                str(row["block_size"]),
                _fmt(row["page_size_bytes"]),
                _fmt(row["bytes_per_block"]),
                per_token,
            )
        console.print(g)
    c = r["connector"]
    if c is None:
        console.print("Connector: none (preempted requests come back through the prefix cache or recompute)")
    else:
        ct = Table(
            title=safe(f"Connector {c['name']} ({c['source']}; SupportsHMA: {c['supports_hma']})"), title_justify="left"
        )
        for col in ("group", "spec", "layers", "status", "reason", "vLLM source"):
            ct.add_column(col)
        for row in c["groups"]:
            style = "green" if row["status"].startswith("carried") else "bold red"
            ct.add_row(
                "all" if row["group"] < 0 else str(row["group"]),
                safe(row["spec"]),
                str(row["layers"]),
                f"[{style}]{safe(row['status'])}[/]",
                safe(row["reason"]),
                safe(row["where"]),
            )
        console.print(ct)
    if "vllm" in r:
        _render_vllm(r["vllm"], console)
    h = Table(title="Hazards", title_justify="left")
    for col in ("severity", "code", "what to do"):
        h.add_column(col)
    for hz in r["hazards"]:
        style = SEVERITY_STYLE.get(hz["severity"], "")
        h.add_row(f"[{style}]{safe(hz['severity'])}[/]", safe(hz["code"]), safe(hz["message"]))
    console.print(h)


def _render_vllm(v: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    from kvdoctor.cli.text import safe

    if not v.get("available", True):
        console.print(safe(f"vLLM's own answer: unavailable ({v['reason']})"))
        return
    t = Table(title=safe(f"Beside it: vLLM {v['version']} ({v['path']})"), title_justify="left")
    for col in ("question", "kvdoctor", "vLLM", "agree"):
        t.add_column(col)
    for row in v["checks"]:
        mark = "[green]yes[/]" if row["agree"] else "[bold red]NO[/]"
        t.add_row(safe(row["question"]), safe(row["kvdoctor"]), safe(row["vllm"]), mark)
    console.print(t)
