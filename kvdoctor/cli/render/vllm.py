"""vLLM's room in the CLI (its line of ``kvdoctor.cli.render.RENDERERS``): how vLLM's answers are drawn.

``kvdoctor inspect MODEL --server vllm [VLLM FLAGS]``: vLLM's specs, groups and connector, as tables (the rule model,
``kvdoctor.core.vllm``, no torch, always answers; with ``--engine vllm`` the installed vLLM answers too, through
``kvdoctor.api._inspect_vllm``, shown beside it, every disagreement a KVD115 drift hazard; when vLLM cannot be
imported the report says why it did not). And ``roundtrip --server vllm --engine vllm``'s lines: what vLLM's own
offloading worker moved, group by group, and why a row is red. Rich is imported when a table is drawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvdoctor.cli.inspect_run import InspectRun
from kvdoctor.cli.layout import WIDE, hazards_block, kv_table
from kvdoctor.cli.render import Pairs, Renderer
from kvdoctor.core.vllm.analysis import GroupRow, VllmAnswersFacts, VllmBesideReport, VllmReport, VllmUnavailable
from kvdoctor.report.units import NONE, format_bytes, human, yes_no
from kvdoctor.text import safe

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.roundtrip.result import ComponentCheck, RoundtripResult, VllmUsed


class VllmInspectRun(InspectRun):
    """``inspect --server vllm``: the answer is ``kvdoctor.api._inspect_vllm.VllmInspectJob``'s; its tables here."""

    def render(self, report: VllmReport, console: Console) -> None:
        render(report, console)


# --- inspect: the tables (they read only the typed result, so JSON and tables agree) -----------------


def render(r: VllmReport, console: Any = None) -> None:
    """The vLLM rule model's tables (and vLLM's own answers beside them); every column folds."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console(emoji=False)
    m, b = r.model, r.block_size
    t = kv_table("Model (vLLM)")
    hma = r.hybrid_kv_cache_manager
    for key, value in (
        ("architecture", f"{m.architecture} ({m.model_type})"),
        ("family", m.family),
        ("layers with state", human(m.layers)),
        ("block size", f"{b.tokens} tokens: {b.reason}"),
        *((("max model length", f"{b.max_model_len} tokens: {b.max_model_len_reason}"),) if b.max_model_len else ()),
        *((("Mamba block", f"{b.mamba_block_size} tokens: {b.mamba_block_reason}"),) if b.mamba_block_size else ()),
        ("hybrid KV cache manager", f"{'on' if hma.enabled else 'off'}: {hma.reason}"),
        ("preemption", f"{r.preemption.mode}, no backup ({r.preemption.where})"),
        ("rules", r.rules_revision),
    ):
        t.add_row(key, safe(value))
    console.print(t)
    if r.groups is None:
        refusal = r.refusal
        text = f"vLLM refuses: {refusal.message} ({refusal.where})" if refusal else "vLLM refuses to group the layers"
        console.print(Text(f"KV cache groups: {text}", overflow="fold"))
    elif console.width < WIDE:  # one row per group, its facts wrapped at words: no spec name broken
        g = kv_table("KV cache groups (per TP rank)")
        for row in r.groups:
            g.add_row(f"group {row.group}", safe("; ".join(_group_facts(row))))
        console.print(g)
    else:
        g = Table(title="KV cache groups (per TP rank)", title_justify="left")
        for col in ("group", "spec", "layers", "block", "page", "per block", "per token"):
            g.add_column(col, overflow="fold", min_width=_longest(r.groups, "spec") if col == "spec" else None)
        for row in r.groups:
            g.add_row(str(row.group), safe(row.spec), *_group_facts(row)[1:])
        console.print(g)
    c = r.connector
    if c is None:
        console.print("Connector: none (preempted requests come back through the prefix cache or recompute)")
    else:
        title = f"Connector {c.name} ({c.source}; supports HMA: {yes_no(c.supports_hma)})"
        if console.width < WIDE:
            ct = kv_table(safe(title))
        else:
            ct = Table(title=safe(title), title_justify="left")
            for col in ("group", "spec", "layers", "status", "reason", "vLLM source"):
                ct.add_column(col, overflow="fold")
        for row in c.groups:
            style = "green" if row.status.startswith("carried") else "bold red"
            group = "all" if row.group < 0 else str(row.group)
            status = f"[{style}]{safe(row.status)}[/]"
            if console.width < WIDE:
                facts = f"{safe(row.spec)}, {row.layers} layers: {status}: {safe(row.reason)} ({safe(row.where)})"
                ct.add_row(f"group {group}", facts)
            else:
                ct.add_row(group, safe(row.spec), str(row.layers), status, safe(row.reason), safe(row.where))
        console.print(ct)
    if isinstance(r, VllmBesideReport):
        _render_vllm(r.vllm, console, safe, NONE)
    console.print(hazards_block(r.hazards, console.width))


def _group_facts(row: GroupRow) -> list[str]:
    """A group's spec, layers, block, page, per block and per token, as a person reads them."""
    layers = f"{len(row.layers)} layers" + (f" (+{row.padding_layers} padding)" if row.padding_layers else "")
    per_token = "per request" if row.per_request else f"{format_bytes(row.bytes_per_token)}/token"
    return [
        row.spec,
        layers,
        f"block {row.block_size} tokens",
        f"page {format_bytes(row.page_size_bytes)}",
        f"{format_bytes(row.bytes_per_block)}/block",
        per_token,
    ]


def _longest(rows: Any, attr: str) -> int | None:
    return max((len(str(getattr(row, attr))) for row in rows), default=0) or None


def _render_vllm(v: VllmAnswersFacts | VllmUnavailable, console: Any, safe: Any, none: str) -> None:
    from rich.table import Table
    from rich.text import Text

    if isinstance(v, VllmUnavailable):
        console.print(Text(f"vLLM's own answer: unavailable ({v.reason})", overflow="fold"))
        return
    t = Table(title=safe(f"Beside it: vLLM {v.version or none} ({v.path or none})"), title_justify="left")
    for col in ("question", "kvdoctor", "vLLM", "agree"):
        t.add_column(col, overflow="fold")
    for row in v.checks:
        mark = "[green]yes[/]" if row.agree else "[bold red]NO[/]"
        t.add_row(safe(row.question), safe(row.kvdoctor), safe(row.vllm), mark)
    console.print(t)


# ---- roundtrip --server vllm --engine vllm: what vLLM's offloading worker moved -----------------------


def roundtrip_used(result: RoundtripResult) -> Pairs:
    """The ``used`` block of a round trip on vLLM's own offloading worker."""
    used: VllmUsed = result.used  # type: ignore[assignment]  # vLLM's round trip runs on --engine vllm only
    return _vllm_used(used, result.elapsed_s)


def roundtrip_why(row: ComponentCheck, result: RoundtripResult) -> str:
    """One sentence on why a ``--engine vllm`` row is red."""
    return vllm_why(row, result.used)  # type: ignore[arg-type]


def _vllm_used(used: VllmUsed, elapsed_s: float) -> list[tuple[str, object]]:
    """vLLM's worker, the one request, and each group's copy ledger: block ids -> host slots -> fresh ids."""
    pairs: list[tuple[str, object]] = [
        ("worker", f"vLLM {used.vllm_version} {used.worker} (v1/kv_offload/cpu/gpu_worker.py), one block a chunk"),
        ("run", f"1 request of {used.tokens:,} tokens: every group stored to CPU, loaded into fresh block ids"),
        ("seed", used.seed),
        ("layers per group", used.layers_per_group or "all"),
    ]
    for g in used.groups:
        ids = lambda xs: " ".join(str(x) for x in xs)  # noqa: E731
        pairs.append(
            (
                f"g{g.group}",
                f"{g.spec}, {g.layers} layers x {len(g.block_ids)} blocks of {format_bytes(g.page_bytes)}: "
                f"blocks {ids(g.block_ids)} -> host {ids(g.host_slots)} -> blocks {ids(g.new_block_ids)}; "
                f"{format_bytes(g.bytes_out)} out, {format_bytes(g.bytes_in)} in of {format_bytes(g.expected_bytes)}",
            )
        )
    pairs.append(("elapsed", f"{elapsed_s:.2f} s"))
    return pairs


def vllm_why(row: ComponentCheck, used: VllmUsed) -> str:
    """One sentence on why a ``--engine vllm`` row is red."""
    if row.name.endswith(".ledger"):
        g = used.groups[int(row.name[1:].split(".")[0])]
        return (
            f"vLLM's descriptors moved {row.bytes_out:,} bytes out and {row.bytes_in:,} in; the group holds "
            f"{row.bytes:,} ({len(g.block_ids)} blocks x {g.layers} layers x {g.page_bytes:,} bytes)"
        )
    text = f"{row.mismatched_bytes:,} of {row.bytes:,} bytes differ"
    if row.first_plane is not None:
        text += f", first in {row.first_plane} (layer {row.first_layer} of the group), fresh block {row.first_slot}"
    if not row.ledger_ok:
        text += (
            f"; vLLM's descriptors moved {row.bytes_out:,} of its bytes out, {row.bytes_in:,} in "
            f"(most descriptors over one byte {row.copies_out}/{row.copies_in})"
        )
    return text


RENDERER = Renderer(inspect_run=VllmInspectRun, roundtrip_used=roundtrip_used, roundtrip_why=roundtrip_why)
