"""``kvdoctor roundtrip``: run SGLang's retraction protocol on real pools and diff every byte.

One typed result (:class:`kvdoctor.roundtrip.result.RoundtripResult`) is rendered four ways: the tables
and key/value blocks below, ``--json`` (the report header, then the result's own keys), the JUnit
file and the GitHub step summary (``kvdoctor.report.verdicts``). Every outside string (a model
path, a pool class, an SGLang note) is printed as literal text, never parsed as rich markup, and
nothing is cut with an ellipsis: at 80 columns cells fold, and the run's facts are a key/value
block, not one long line. The output ends with the one verdict line every command ends with.

``--server vllm --engine vllm`` runs vLLM's own offloading worker (``kvdoctor.engines.vllm.roundtrip``) and
returns the same result: one row per group component and one ledger row per group, the groups' copy ledger
in ``used``, and each run-time shim named in the header.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import typer

from kvdoctor.api._roundtrip import RoundtripArgs, RoundtripJob
from kvdoctor.cli.command import CommandRun, ErrorCase
from kvdoctor.cli.launch import own_options
from kvdoctor.cli.progress import with_progress
from kvdoctor.cli.render import Renderer, renderer
from kvdoctor.cli.typed_command import command, shown_option
from kvdoctor.report import reportable
from kvdoctor.report.units import NONE, format_bytes, human
from kvdoctor.roundtrip.faults import InjectName
from kvdoctor.text import plain

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.core.engine_ref import EngineRef
    from kvdoctor.report.envelope import RunHeader
    from kvdoctor.report.roundtrip_report import Report
    from kvdoctor.roundtrip.result import RoundtripResult

# ---- the human output ------------------------------------------------------------------------


def _kv_block(console: Console, title: str, pairs: Sequence[tuple[str, object]]) -> None:
    """TITLE, then one ``key  value`` line per pair; long values fold onto the next lines, never cut."""
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(overflow="fold")
    for key, value in pairs:
        grid.add_row(Text(key), Text(_plain(value)))
    console.print(Text(title, style="bold"))
    console.print(Padding(grid, (0, 0, 0, 2)))


def _plain(value: object) -> str:
    return plain(human(value))


def _engine_name(engine: EngineRef) -> str:
    if engine.name == "kvdoctor":
        return f"kvdoctor {engine.version or NONE} (its own model of SGLang's pools)"
    where = f" from {engine.path}" if engine.path else ""
    return f"{engine.name} {engine.version or NONE}{where}"


def _head(console: Console, result: RoundtripResult, head: RunHeader) -> None:
    pairs: list[tuple[str, object]] = [
        ("model", result.used.model),
        ("engine", _engine_name(head.engine)),
        ("kv cache", result.kv_cache_dtype),
        ("backup", result.backend),
        ("device", result.device),
        ("injected", result.injected),
    ]
    if result.rules_revision:
        pairs.insert(2, ("rules", result.rules_revision))
    shims = getattr(result.used, "shims", None)  # --engine vllm: every run-time patch that lets it run on CPU
    pairs += [("shim", f"{shim['name']}: {shim['why']}") for shim in shims or ()]
    _kv_block(console, "kvdoctor roundtrip", pairs)


def _table(console: Console, result: RoundtripResult) -> None:
    from rich.table import Table
    from rich.text import Text

    title = Text("Round trip ")
    title.append("OK" if result.ok else "DIFFERS", style="bold green" if result.ok else "bold red")
    table = Table(title=title, title_justify="left")
    table.add_column("component", no_wrap=True)  # never folded: a name is read (and grepped) whole
    for col in ("bytes", "differ", "out/in", "ledger", "verdict"):
        table.add_column(col, overflow="fold", justify="right" if col in ("bytes", "differ") else "left")
    for row in result.components:
        table.add_row(
            Text(row.name),
            format_bytes(row.bytes),
            human(row.mismatched_bytes),
            f"{row.copies_out}/{row.copies_in}",
            Text("ok") if row.ledger_ok else Text("BAD", style="red"),
            Text("equal", style="green") if row.ok else Text("RED", style="bold red"),
        )
    console.print(table)


def inject_mismatch(result: RoundtripResult) -> str | None:
    """A sentence when --inject broke something other than (or more than) what the fault targets."""
    if result.inject_matched is not False:
        return None
    expected, failing = set(result.expected_red), set(result.failing)
    parts = [f"--inject {result.injected} should turn red exactly {', '.join(sorted(expected)) or 'nothing'}"]
    if failing - expected:
        parts.append(f"but also broke {', '.join(sorted(failing - expected))}")
    if expected - failing:
        parts.append(f"and left {', '.join(sorted(expected - failing))} green (the fault went undetected there)")
    return "; ".join(parts)


def render(console: Console, result: RoundtripResult, head: RunHeader, drawn: Renderer) -> None:
    """The tables, the run's facts and every red row's reason (the verdict line follows them); what the run used and
    why a row is red are in the words of the server's renderer, DRAWN (``kvdoctor.cli.render``)."""
    from rich.text import Text

    _head(console, result, head)
    _table(console, result)
    _kv_block(console, "used", drawn.roundtrip_used(result))
    for row in result.components:
        if not row.ok:
            line = Text(row.name, style="red")
            line.append(f": {_plain(drawn.roundtrip_why(row, result))}")
            console.print(line, overflow="fold")
    for hazard in result.hazards:
        line = Text(hazard.code, style="bold red")
        line.append(
            f" ({_plain(hazard.severity)}): {_plain(hazard.message)} Not gated: a hazard of this launch line "
            "(see kvdoctor inspect); the round trip above tests the pool's copy path only."
        )
        console.print(line, overflow="fold")
    mismatch = inject_mismatch(result)
    if mismatch:
        line = Text("injected fault mismatch: ", style="bold yellow")
        line.append(_plain(mismatch))
        console.print(line, overflow="fold")


# ---- the command -----------------------------------------------------------------------------


def _roundtrip(ctx: typer.Context, args: RoundtripArgs, *, json_output: bool) -> None:
    RoundtripRun(ctx, replace(args, server_args=tuple(ctx.args)), json_output=json_output)()


roundtrip = command(
    RoundtripArgs,
    _roundtrip,
    name="roundtrip",
    doc="""Retract requests, let others reuse their slots, restore, and diff every state component bitwise.

    Any SGLang server flag (e.g. --kv-cache-dtype mxfp8 --disaggregation-mode decode) may follow MODEL.
    With --engine sglang the installed SGLang builds the pools and runs backup_kv_cache/restore_kv_cache.
    With --server vllm --engine vllm, vLLM's CPUOffloadingWorker stores every KV-cache group's blocks and
    loads them into fresh ones (vLLM flags follow MODEL). Exit 0 when everything matches, 1 when anything
    differs, 2 on bad input.
    """,
    shown=(shown_option("json_output", "--json", help="Print one JSON object instead of tables."),),
    before="junit_path",
    parse_as={"inject": InjectName | None},  # the registry's round-trip faults, listed in --help
)


class RoundtripRun(CommandRun["RoundtripResult", "Report"]):
    """One ``kvdoctor roundtrip``: the steps of ``kvdoctor.cli.command`` around :class:`kvdoctor.api.RoundtripJob`
    (the job :func:`kvdoctor.api.roundtrip` executes): the work under a progress bar, the output, the verdict line,
    then JUnit and the step summary."""

    def __init__(self, ctx: typer.Context, args: RoundtripArgs, *, json_output: bool) -> None:
        self.ctx, self.json_output = ctx, json_output
        self.job = RoundtripJob(args, explicit=_explicit(ctx), own_options=own_options(ctx))

    def check(self) -> None:
        self.job.check()

    def preflight(self) -> None:
        self.job.preflight()  # before any work: a red verdict must not end as exit 2

    def error_case(self) -> ErrorCase:
        return self.job.error_case()

    def work(self) -> RoundtripResult:
        # The engine checks what it can without torch now (kvdoctor's: the rule model's refusals), so bad
        # input is one line before the progress bar; the work imports torch (and the server) under it.
        work, first_step = self.job.prepare()
        return work(None) if self.json_output else with_progress(work, first_step)

    def deliver(self, result: RoundtripResult) -> Report:
        published = self.job.report(result)
        head = reportable.header(published)
        if self.json_output:
            typer.echo(json.dumps(reportable.json_document(published, head), indent=2, default=str))
        else:
            from rich.console import Console

            self.status = Console(emoji=False, highlight=False)
            render(self.status, result, head, renderer(self.job.server))
        return published

    def after(self, published: Report) -> None:
        self.job.publish(published)


def _explicit(ctx: typer.Context) -> frozenset[str]:
    """The options given on the command line (click's ParameterSource, read by name: Typer may vendor click)."""
    return frozenset(
        p.name
        for p in ctx.command.params
        if p.name and (src := ctx.get_parameter_source(p.name)) is not None and src.name != "DEFAULT"
    )
