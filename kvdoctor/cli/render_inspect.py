"""Rich tables for ``kvdoctor inspect`` (reads only the report dict, so JSON and tables agree).

Every string that can come from the outside (the config, its path, a pasted flag) goes through
``safe``; only the markup written here (colours, bold) is markup.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from kvdoctor.cli.text import safe
from kvdoctor.cli.units import format_bytes

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _model_table(r: dict[str, Any]) -> Table:
    m = r["model"]
    t = Table(title="Model", show_header=False, title_justify="left")
    for _ in range(2):
        t.add_column(overflow="fold")
    layers = m["layers"]
    rows = [
        ("model_type", f"{m['model_type']} (text: {m['text_model_type']})"),
        ("architecture", m["architecture"]),
        ("family", f"{m['family']}  [{m['sglang_predicate'] or 'attention only'}; {m['rule_source']}]"),
        (
            "layers",
            f"{layers['total']} total: {layers['full_attention']} full attention, "
            f"{layers['sliding_window']} sliding window, {layers['recurrent']} recurrent",
        ),
        ("kv cache dtype", r["kv_cache_dtype"]),
        ("tp size", str(m["tp_size"])),
        ("rules", r["rules_revision"]),
    ]
    for key, value in rows:
        t.add_row(key, safe(value))
    return t


def _components_table(r: dict[str, Any]) -> Table:
    t = Table(title="State components (per TP rank)", title_justify="left")
    t.add_column("component", overflow="fold")
    for col in ("pool", "index", "dtype", "layers", "shape / layer", "bytes"):
        t.add_column(col, overflow="fold")  # wrap, even inside a long word: never cut with …
    for c in r["components"]:
        size = c.get("bytes_per_token") or c.get("bytes_per_request")
        unit = "/token" if "bytes_per_token" in c else "/request"
        shapes = " + ".join("x".join(map(str, s)) for s in c["shape_per_layer"])
        t.add_row(
            *(safe(v) for v in (c["name"], c["pool"], c["index"], c["dtype"], c["layers"], shapes)),
            f"{format_bytes(size)}{unit}",
        )
    return t


def _backup_table(r: dict[str, Any]) -> Table:
    b = r["retraction_backup"]
    applies = "applies" if b["applies"] else "does not apply (not a PD decode server)"
    how = {"flag": "explicit flag", "host-receive threshold": "declared by the host-receive threshold"}.get(
        b["source"], "inferred"
    )
    title = f"Retraction backup: {b['backend']} ({how}; {applies}); hicache_ratio {b['hicache_ratio']}"
    t = Table(title=safe(title), title_justify="left")
    for col in ("host_pool needs", "holds", "value"):
        t.add_column(col, overflow="fold")  # wrap, even inside a long word: never cut with …
    for c in b["reasons"]:
        mark = "[green]yes[/]" if c["passed"] else "[red]no[/]"
        t.add_row(safe(c["name"]), mark, safe(c["detail"]))
    return t


def _sizing_table(r: dict[str, Any]) -> Table:
    s = r["sizing"]
    f = s["forecast"]
    t = Table(title="Pool sizing", show_header=False, title_justify="left")
    for _ in range(2):
        t.add_column(overflow="fold")
    full = s["full_tokens"] if s["full_tokens"] is not None else "from GPU memory"
    t.add_row("full pool", safe(f"{full} tokens, {format_bytes(s['full_bytes'])}"))
    if s["swa_tokens"] is not None:
        ratio = f"{s['swa_full_tokens_ratio']} of full, {s['swa_ratio_source']}"
        t.add_row("SWA pool", safe(f"{s['swa_tokens']} tokens ({ratio}), {format_bytes(s['swa_bytes'])}"))
    if r["uses_ssm_state"]:
        slots = s["mamba_slots"] if s["mamba_slots"] is not None else "?"
        ratio = f"ratio {s['mamba_full_memory_ratio']} ({s['mamba_ratio_source']})"
        t.add_row(
            "mamba pool",
            safe(f"{slots} slots ({s['mamba_slots_source']}), {s['mamba_slots_per_request']} per request, {ratio}"),
        )
    fit = f["requests_fit"] if f["requests_fit"] is not None else "unknown (set --max-total-tokens)"
    verdicts = {True: "[yellow]retraction expected[/]", False: "fits, no retraction", None: "unknown"}
    verdict = verdicts[f["will_retract"]]
    load = f"{f['concurrent']} in flight"
    t.add_row("forecast", f"{safe(fit)} requests of {f['tokens_per_request']} tokens fit; {load}: {verdict}")
    return t


def _hazard_table(r: dict[str, Any]) -> Table:
    t = Table(title="Hazards", title_justify="left")
    for col in ("severity", "code", "what to do"):
        t.add_column(col, overflow="fold")  # wrap, even inside a long word: never cut with …
    for h in r["hazards"]:
        style = SEVERITY_STYLE.get(h["severity"], "")
        t.add_row(f"[{style}]{safe(h['severity'])}[/]", safe(h["code"]), safe(h["message"]))
    if not r["hazards"]:
        t.add_row("-", "-", "none")
    return t


def render(report: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console(emoji=False)
    pools = report["pools"]
    console.print(_model_table(report))
    console.print(_components_table(report))
    console.print(
        safe(
            f"uses_ssm_state={report['uses_ssm_state']}  kv_pool={report['kv_pool']}  "
            f"req_to_token_pool={pools['req_to_token_pool']}  cpu_copy_carries_mamba={report['cpu_copy_carries_mamba']}"
            f"  => caller backs up recurrent state: {report['caller_backs_up_mamba']}"
        )
    )
    console.print(safe(f"PD state types: {', '.join(report['pd_state_types']) or 'none beyond the main KV'}"))
    console.print(_backup_table(report))
    console.print(_sizing_table(report))
    console.print(_hazard_table(report))
