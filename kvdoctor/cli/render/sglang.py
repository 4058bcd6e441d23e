"""SGLang's room in the CLI (its line of ``kvdoctor.cli.render.RENDERERS``): how SGLang's answers are drawn.

``inspect``'s tables of the rule model's result (they read only the typed result, so JSON and tables agree), the
installed SGLang's answers beside them (``inspect --engine sglang``), and what a round trip on SGLang's pools
(kvdoctor's model of them or the installed SGLang's) used and why a row is red.

Read anywhere: in a terminal, piped into a CI log at 80 columns, under ``NO_COLOR``. Nothing a person
needs is cut with "…": every column folds (wraps, inside a long word if it must), and where a wide
table would break names mid-word (a component's pool class, a hazard's advice) a narrow console gets
a vertical layout instead: one block per row, the text wrapped at words across the whole width.

Values print as a person writes them (``kvdoctor.report.units``): ``–`` for nothing, yes/no, sizes with
units; the JSON keeps the raw values. Every string that can come from the outside (the config, its
path, a pasted flag, an SGLang message, its paths and class names) goes through ``safe``: only the markup written
here is markup. Rich is imported when a table is drawn (``inspect --json`` draws none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvdoctor.cli.inspect_run import InspectRun
from kvdoctor.cli.layout import WIDE, fits_whole, hazards_block, kv_table
from kvdoctor.cli.render import Pairs, Renderer
from kvdoctor.core.sglang.inspect_result import InspectReport, shown
from kvdoctor.report.units import format_bytes, human, noun_for, yes_no
from kvdoctor.text import safe

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.table import Table

    from kvdoctor.core.sglang.inspect_result import ComponentRow, SglangAnswers  # SglangAnswers: made on first use
    from kvdoctor.roundtrip.result import ComponentCheck, EngineUsed, ModelUsed, RoundtripResult


class SglangInspectRun(InspectRun):
    """``inspect`` of an SGLang launch line: the rule model's tables, and the engine's beside them when asked."""

    def render(self, report: Any, console: Console) -> None:
        if isinstance(report, InspectReport):
            render(report, console)
        sglang = getattr(report, "sglang", None)
        if sglang is not None:
            render_beside(sglang, console)
            if not isinstance(report, InspectReport):  # kvdoctor refused: the hazards are SGLang's drift alone
                console.print(hazards_block(report.hazards, console.width))


# ---- inspect: the rule model's tables --------------------------------------------------------------


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
    from rich.table import Table

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
    from rich.table import Table

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


def render(report: InspectReport, console: Console | None = None) -> None:
    """Every table of the rule model's result (the verdict line is the command's, printed after)."""
    from rich.console import Console, Group
    from rich.text import Text

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


# ---- inspect --engine sglang: the installed SGLang's answers beside kvdoctor's ------------------------


def _value(value: Any) -> str:
    """A field's value: shapes as ``4x128 + 4x128``, lists joined, ``–``/yes/no for the rest."""
    if isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple)) for v in value):
        return " + ".join("x".join(str(d) for d in v) for v in value)
    return human(value)


def version_line(answers: SglangAnswers) -> str:
    """Which SGLang answered, and whether it is the version kvdoctor's rules restate."""
    version = human(answers.engine.version)
    if answers.differs_from_rules:
        return f"installed SGLang {version} differs from the rules revision (SGLang {answers.rules_version})"
    return f"installed SGLang {version} is the rules revision (SGLang {answers.rules_version})"


def render_beside(answers: SglangAnswers, console: Console | None = None) -> None:
    """The installed SGLang's answers beside kvdoctor's, one row per field, then its refusals and its drift."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console(emoji=False)
    engine = answers.engine
    title = f"kvdoctor beside SGLang {human(engine.version)} (live, {human(engine.path)})"
    names = sorted(set(answers.kvdoctor) | set(answers.fields))
    drifted = {d.field for d in answers.drift}
    skipped = answers.skipped
    rows = []
    for name in names:
        live = shown(name, answers.fields.get(name))
        component = name.split(".")[0] if "." in name else None
        if name in skipped or (component and (component in skipped or "components" in skipped)):
            why = skipped.get(name) or skipped.get(component or "") or skipped.get("components", "")
            agree = f"not asked: {safe(why)}"
        else:
            agree = "[bold red]DRIFT[/]" if name in drifted else "[green]yes[/]"
        rows.append((safe(name), safe(_value(answers.kvdoctor.get(name))), safe(_value(live)), agree))
    table = Table(title=safe(title), title_justify="left")
    table.add_column("field", overflow="fold", min_width=min(32, max((len(n) for n in names), default=5)))
    for col in ("kvdoctor", "SGLang", "agree"):
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*row)
    if not fits_whole(table, console):  # then each field is one block, its answers wrapped at words
        table = kv_table(safe(title))
        for name, ours, theirs, agree in rows:
            table.add_row(name, f"kvdoctor {ours}; SGLang {theirs}; agree: {agree}")
    console.print(table)
    lines = [version_line(answers)] if answers.rules_version else []
    if answers.kvdoctor_refusal:
        lines.append(f"kvdoctor refuses: {answers.kvdoctor_refusal}")
    if answers.refusal:
        lines.append(f"SGLang refuses ({answers.refusal.stage}): {answers.refusal.message}")
    lines += [f"stub: {stub}" for stub in answers.stubs]
    for line in lines:  # outside text: printed as Text, never parsed as markup
        console.print(Text(line, overflow="fold"))
    for drift in answers.drift:
        text = Text("KVD015-RULES-DRIFT", style="bold red")
        text.append(f" {drift.field}: kvdoctor {_value(drift.kvdoctor)}, SGLang {_value(drift.sglang)}")
        console.print(text, overflow="fold")
    state = f"{len(answers.drift)} drifting" if answers.drift else "no drift"
    console.print(Text(f"SGLang beside kvdoctor: {state} over {len(names)} fields"))


# ---- roundtrip: what ran on SGLang's pools, and why a row is red -------------------------------------


def roundtrip_used(result: RoundtripResult) -> Pairs:
    """The ``used`` block: what the installed SGLang built and ran, or what kvdoctor's model of its pools did."""
    from kvdoctor.roundtrip.result import EngineUsed  # its dataclasses cost inspect's start-up 27 ms: a round trip's

    used = result.used
    if isinstance(used, EngineUsed):
        return _engine_used(used, result)
    return _model_used(used, result.elapsed_s)  # type: ignore[arg-type]  # kvdoctor's model of SGLang's pools


def roundtrip_why(row: ComponentCheck, result: RoundtripResult) -> str:
    """One sentence on why ROW of a round trip on SGLang's pools is red."""
    return why(row)


def _model_used(used: ModelUsed, elapsed_s: float) -> list[tuple[str, object]]:
    layers = f"full {used.full_layers}, swa {used.swa_layers}, recurrent {used.recurrent_layers}"
    return [
        (
            "run",
            f"{used.requests} {noun_for(used.requests, 'request')} ({used.retracted} retracted) "
            f"up to {used.max_tokens} tokens",
        ),
        ("page size", used.page_size),
        ("seed", used.seed),
        ("layers", layers),
        ("KV heads", used.kv_heads),
        ("window", used.sliding_window),
        ("reductions", used.reductions),
        ("pool", used.kv_pool),
        ("token index", used.token_index_space),
        ("CPU copy carries mamba", yes_no(used.cpu_copy_carries_mamba)),
        ("caller backs up mamba", yes_no(used.caller_backs_up_mamba)),
        ("scales", used.scale_layout),
        ("pool memory", format_bytes(used.pool_bytes)),
        ("host copy chunk", f"{used.chunk:,} slots"),
        ("restored into new slots", yes_no(used.restored_into_new_slots)),
        ("most slot runs", used.max_slot_runs),
        ("elapsed", f"{elapsed_s:.2f} s"),
    ]


def _engine_used(used: EngineUsed, result: RoundtripResult) -> list[tuple[str, object]]:
    """What SGLang built and ran, what kvdoctor supplied, and every stub: one fact per line."""
    classes = ", ".join(f"{k} {v}" for k, v in used.pool_classes.items())
    return [
        ("pools", f"{classes} (built by SGLang's KVCacheConfigurator)"),
        ("CPU copy carries mamba", yes_no(used.cpu_copy_carries_mamba)),
        ("backup", f"{result.backend} ({used.backend_source})"),
        (
            "run",
            f"{used.requests} {noun_for(used.requests, 'request')} ({used.retracted} retracted) "
            f"up to {used.max_tokens} tokens",
        ),
        ("page size", used.page_size),
        ("seed", used.seed),
        ("pool tokens", used.pool_tokens),
        ("data", used.data),
        ("admission", used.admission),
        *(("stub", stub) for stub in used.stubs),
        *(("note", note) for note in used.notes),
        ("elapsed", f"{result.elapsed_s:.2f} s"),
    ]


def _where(row: ComponentCheck) -> str:
    if row.first_plane is None:
        return ""
    who = "padding" if row.first_request is None else f"req {row.first_request}"
    at = f"layer {human(row.first_layer)}, pos {human(row.first_position)}, slot {human(row.first_slot)}"
    return f"{who}, {row.first_plane}, {at}"


def why(row: ComponentCheck) -> str:
    """One sentence on why ROW is red."""
    if row.name == "backup_aliasing":
        return (
            f"the backup of {row.first_plane} for req {row.first_request} is a view of the live pool, "
            "not a copy: its bytes are lost as soon as another request reuses the slot"
        )
    if row.name == "slot_reuse" and row.first_request is None:
        return "no restored slot was captured: nothing shows the restore landed in fresh slots"
    if row.name == "slot_reuse":
        return (
            f"req {row.first_request} was restored into slot {row.first_slot} of {row.first_plane}, "
            "a slot it held before retraction: the round trip proves nothing about reuse"
        )
    text = "first mismatch " + (_where(row) or "bytes agree")
    if not row.ledger_ok:
        text += f"; ledger: copied out {row.copies_out}x, in {row.copies_in}x per request"
    return text


RENDERER = Renderer(inspect_run=SglangInspectRun, roundtrip_used=roundtrip_used, roundtrip_why=roundtrip_why)
