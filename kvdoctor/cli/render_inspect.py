"""Rich tables for ``kvdoctor inspect`` (they read only the typed result, so JSON and tables agree).

Read anywhere: in a terminal, piped into a CI log at 80 columns, under ``NO_COLOR``. Nothing a person
needs is cut with "…": every column folds (wraps, inside a long word if it must), and where a wide
table would break names mid-word (a component's pool class, a hazard's advice) a narrow console gets
a vertical layout instead: one block per row, the text wrapped at words across the whole width.

Values print as a person writes them (``kvdoctor.report.units``): ``–`` for nothing, yes/no, sizes with
units; the JSON keeps the raw values. Every string that can come from the outside (the config, its
path, a pasted flag, an SGLang message) goes through ``safe``: only the markup written here is markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from kvdoctor.cli.layout import fits_whole, kv_table
from kvdoctor.core.registry import Hazard
from kvdoctor.report.units import NONE, format_bytes, human, noun_for, yes_no
from kvdoctor.text import safe

if TYPE_CHECKING:  # annotations only: the vLLM tables use hazards_block without loading SGLang's rule model
    from kvdoctor.core.sglang.inspect_result import ComponentRow, InspectReport

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
WIDE = 120  # below this many columns, rows whose cells would break mid-word are laid out vertically


def _model_table(r: InspectReport) -> Table:
    m = r.model
    t = kv_table("Model")
    layers = m.layers
    rule = f"[{m.sglang_predicate or 'attention only'}; {m.rule_source}]"
    rows = [
        ("model_type", f"{m.model_type} (text: {m.text_model_type})"),
        ("architecture", m.architecture),
        ("family", f"{m.family}  {rule}"),
        (
            "layers",
            f"{layers.total} total: {layers.full_attention} full attention, "
            f"{layers.sliding_window} sliding window, {layers.recurrent} recurrent",
        ),
        ("sliding window", human(m.sliding_window)),
        ("kv cache dtype", r.kv_cache_dtype),
        ("tp size", human(m.tp_size)),
        ("rules", r.rules_revision),
    ]
    for key, value in rows:
        t.add_row(key, safe(value))
    return t


def _shapes(c: ComponentRow) -> str:
    return " + ".join("x".join(map(str, s)) for s in c.shape_per_layer)


def _size(c: ComponentRow) -> str:
    return f"{format_bytes(c.size)}/{c.per}"


def _components_table(r: InspectReport, console: Console) -> Table:
    """A row per component when the table fits the console whole, else one block per component.

    Fitting is measured (``cli.layout.fits_whole``), not guessed from a column count."""
    title = "State components (per TP rank)"
    if console.width >= WIDE:  # a narrow console never gets the wide table: not built for it
        t = Table(title=title, title_justify="left")
        columns = ("component", "pool", "index", "dtype", "layers", "shape / layer", "bytes")
        names = {"component": "name", "pool": "pool", "dtype": "dtype"}
        for col in columns:
            longest = max((len(str(getattr(c, names[col]))) for c in r.components), default=0) if col in names else 0
            t.add_column(col, overflow="fold", min_width=longest or None)  # names whole; the rest wraps, never …
        for c in r.components:
            t.add_row(*(safe(v) for v in (c.name, c.pool, c.index, c.dtype, c.layers, _shapes(c))), _size(c))
        if fits_whole(t, console):
            return t
    t = kv_table(title)  # one row per component: its name, then every fact wrapped at words
    for c in r.components:
        facts = (
            f"pool {c.pool}; {c.index.replace('_', ' ')}; {c.dtype}; {c.layers} layers; "
            f"shape per layer {_shapes(c)}; {_size(c)}"
        )
        t.add_row(safe(c.name), safe(facts))
    return t


def _pools_table(r: InspectReport) -> Table:
    t = kv_table("Pools")
    for key, value in (
        ("uses SSM state", yes_no(r.uses_ssm_state)),
        ("KV pool", r.kv_pool),
        ("req_to_token pool", r.pools.req_to_token_pool),
        ("mamba pool", human(r.pools.mamba_pool)),
        ("CPU copy carries mamba", yes_no(r.cpu_copy_carries_mamba)),
        ("caller backs up recurrent state", yes_no(r.caller_backs_up_mamba)),
        ("PD state types", ", ".join(r.pd_state_types) or "none beyond the main KV"),
    ):
        t.add_row(key, safe(value))
    return t


def _backup_table(r: InspectReport) -> Table:
    b = r.retraction_backup
    applies = "applies" if b.applies else "does not apply (not a PD decode server)"
    how = {"flag": "explicit flag", "host-receive threshold": "declared by the host-receive threshold"}.get(
        b.source, "inferred"
    )
    title = f"Retraction backup: {b.backend} ({how}; {applies}); hicache ratio {human(b.hicache_ratio)}"
    t = Table(title=safe(title), title_justify="left")
    for col in ("host_pool needs", "holds", "value"):
        t.add_column(col, overflow="fold")  # wrap, even inside a long word: never cut with …
    for c in b.reasons:
        mark = "[green]yes[/]" if c.passed else "[red]no[/]"
        t.add_row(safe(c.name), mark, safe(c.shown or c.detail))
    return t


def _tokens(n: int | None, unknown: str) -> str:
    return unknown if n is None else f"{n:,} tokens"


def _sizing_table(r: InspectReport) -> Table:
    s = r.sizing
    f = s.forecast
    t = kv_table("Pool sizing")
    full = _tokens(s.full_tokens, "sized from free GPU memory at start-up")
    size = f", {format_bytes(s.full_bytes)}" if s.full_bytes is not None else ""
    t.add_row("full pool", safe(f"{full}{size}"))
    if s.swa_tokens is not None:
        ratio = f"{human(s.swa_full_tokens_ratio)} of full, {s.swa_ratio_source}"
        t.add_row("SWA pool", safe(f"{s.swa_tokens:,} tokens ({ratio}), {format_bytes(s.swa_bytes)}"))
    if r.uses_ssm_state:
        slots = f"{s.mamba_slots:,} slots" if s.mamba_slots is not None else "slots"
        ratio = f"memory ratio {human(s.mamba_full_memory_ratio)} ({s.mamba_ratio_source})"
        t.add_row(
            "mamba pool",
            safe(f"{slots} ({s.mamba_slots_source}), {s.mamba_slots_per_request} per request, {ratio}"),
        )
    verdicts = {True: "[yellow]retraction expected[/]", False: "fits, no retraction", None: "unknown"}
    load = f"{f.concurrent:,} in flight"
    if f.requests_fit is None:
        fit = f"how many requests of {f.tokens_per_request:,} tokens fit is unknown (set --max-total-tokens)"
    else:
        fit = f"{f.requests_fit:,} {noun_for(f.requests_fit, 'request')} of {f.tokens_per_request:,} tokens fit"
    t.add_row("forecast", f"{safe(fit)}; {load}: {verdicts[f.will_retract]}")
    return t


def hazards_block(hazards: Sequence[Hazard], width: int, *, title: str = "Hazards") -> Table | Group:
    """The hazards with their full advice: a table when wide, else one block per hazard (the advice
    wrapped at words over the whole width, so no flag name is broken in two)."""
    if width >= WIDE:
        t = Table(title=title, title_justify="left")
        for col in ("severity", "code", "what to do"):
            t.add_column(col, overflow="fold")  # wrap, even inside a long word: never cut with …
        for h in hazards:
            style = SEVERITY_STYLE.get(h.severity, "")
            t.add_row(f"[{style}]{safe(h.severity)}[/]", safe(h.code), safe(h.message))
        if not hazards:
            t.add_row(NONE, NONE, "none")
        return t
    parts: list[Text | Padding] = [Text(title, style="italic")]
    for h in hazards:
        head = Text()
        head.append(h.severity, style=SEVERITY_STYLE.get(h.severity, ""))
        head.append(f"  {h.code}")
        parts += [head, Padding(Text(h.message, overflow="fold"), (0, 0, 0, 2))]
    if not hazards:
        parts.append(Text("none"))
    return Group(*parts)


def render(report: InspectReport, console: Console | None = None) -> None:
    """Every table of the rule model's result (the verdict line is the command's, printed after)."""
    console = console or Console(emoji=False)
    parts: list[RenderableType] = [
        _model_table(report),
        _components_table(report, console),
        _pools_table(report),
        _backup_table(report),
        _sizing_table(report),
    ]
    if report.not_modelled_flags:
        parts.append(Text(f"not modelled (KVD009): {', '.join(report.not_modelled_flags)}", overflow="fold"))
    parts.append(hazards_block(report.hazards, console.width))
    console.print(Group(*parts))  # one print, one write: the same lines as a print per table, for less work
