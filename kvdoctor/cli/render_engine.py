"""The installed server's answers beside kvdoctor's (``inspect --engine sglang``), as a table."""

from __future__ import annotations

from typing import Any

from kvdoctor.cli.text import safe


def _value(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return (
            ", ".join(_value(v) for v in value)
            if not any(isinstance(v, list) for v in value)
            else " + ".join("x".join(str(d) for d in v) for v in value)
        )
    return str(value)


def render_beside(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(emoji=False)
    answers, engine = report["sglang"], report["engine"]
    title = f"kvdoctor beside SGLang {engine['version']} (live, {engine['path']})"
    table = Table(title=safe(title), title_justify="left")
    table.add_column("field", no_wrap=True)
    for col in ("kvdoctor", "SGLang", "agree"):
        table.add_column(col, overflow="fold")
    drifted = {d["field"] for d in answers["drift"]}
    names = sorted(set(answers["kvdoctor"]) | set(answers["fields"]))
    for name in names:
        live = answers["fields"].get(name)
        if isinstance(live, list) and live and all(isinstance(c, str) for c in live) and name.endswith("pool"):
            live = live[0]
        skipped = answers["skipped"]
        if name in skipped or ("." in name and "components" in skipped):
            agree = f"not asked: {skipped.get(name) or skipped['components']}"
        else:
            agree = "[bold red]DRIFT[/]" if name in drifted else "[green]yes[/]"
        table.add_row(safe(name), safe(_value(answers["kvdoctor"].get(name))), safe(_value(live)), agree)
    console.print(table)
    if answers.get("kvdoctor_refusal"):
        console.print(f"kvdoctor refuses: {safe(answers['kvdoctor_refusal'])}", highlight=False)
    if answers.get("refusal"):
        refusal = answers["refusal"]
        console.print(f"SGLang refuses ({safe(refusal['stage'])}): {safe(refusal['message'])}", highlight=False)
    for stub in answers["stubs"]:
        console.print(f"stub: {safe(stub)}", highlight=False)
    for drift in answers["drift"]:
        ours, theirs = safe(_value(drift["kvdoctor"])), safe(_value(drift["sglang"]))
        console.print(
            f"[bold red]KVD015-RULES-DRIFT[/] {safe(drift['field'])}: kvdoctor {ours}, SGLang {theirs}", highlight=False
        )
    verdict = "[bold red]drift[/]" if answers["drift"] else "[green]no drift[/]"
    console.print(f"verdict: {verdict} over {len(names)} fields", highlight=False)
