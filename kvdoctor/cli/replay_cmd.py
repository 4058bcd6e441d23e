"""``kvdoctor replay``: public bugs replayed on real servers, each beside its green control (``kvdoctor.replay``).

``--bug ID`` (repeatable) or ``--all`` runs the cases; ``--list`` lists them (and the pending ones) without running
anything, only the ``--bug`` ones when given; with ``--list``, the options of a run (``--timeout``, ``--junit``,
``--output-dir``) are bad input rather than silently dropped. At 80 columns (a CI log) every bug id, fault and model
stays whole on one line: a table that cannot fit whole is laid out one block per bug instead.

Exit codes: 0 every chosen bug reproduced (control green, subject red or loud, each for the right reason); 1 a bug
not reproduced, or not run here; 2 bad input (checked before anything starts, ``--timeout`` > 0 in every mode); 3 a
deployment failed unexpectedly; 130/143 after Ctrl-C/SIGTERM (everything started was stopped).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import typer

from kvdoctor._exceptions import InputError
from kvdoctor.api._job import names
from kvdoctor.api._replay import ReplayArgs, ReplayJob
from kvdoctor.cli.command import CommandRun
from kvdoctor.cli.layout import fits_whole
from kvdoctor.cli.typed_command import command, shown_option
from kvdoctor.core import replays
from kvdoctor.replay.plan import select
from kvdoctor.replay.report import replay_dict
from kvdoctor.report import reportable, serialize
from kvdoctor.report.envelope import document, header
from kvdoctor.report.serialize import dumps
from kvdoctor.report.units import noun_for
from kvdoctor.text import printable, safe

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.core.replays import Replay
    from kvdoctor.replay.report import Report
    from kvdoctor.replay.run import Matrix


# The options of a run, which --list (it runs nothing) refuses rather than drops: parameter name -> flag.
_RUN_ONLY = {"timeout": "--timeout", "junit_path": "--junit", "output_dir": "--output-dir"}


def _replay(ctx: typer.Context, args: ReplayArgs, *, list_only: bool, json_out: bool) -> None:
    if not args.timeout_s > 0:  # in every mode: a value that can never be a run's is refused wherever it is given
        raise InputError(f"--timeout must be > 0 seconds, got {args.timeout_s}")
    if list_only:
        given = [flag for name, flag in _RUN_ONLY.items() if _given(ctx, name)]
        if given:
            raise InputError(f"--list runs nothing, so {given[0]} has no use there (--list takes --bug, --all, --json)")
        _list(names(args.bug), args.every, json_out)
        return
    ReplayRun(args, json_out=json_out)()


replay = command(
    ReplayArgs,
    _replay,
    name="replay",
    doc="""Replay public bugs inside real servers, each beside its control (docs/bugs.md).

    A bug's row passes only when the control is green and the subject red (or loud), each for the right reason.
    --list runs nothing: it lists the cases (only the --bug ones when given).""",
    shown=(
        shown_option(
            "list_only",
            "--list",
            help="List the cases (and the pending ones; with --bug, only those); run nothing. Takes --bug, --all and "
            "--json; "
            "--timeout, --junit and --output-dir are a run's, so with --list they are bad input (exit 2).",
        ),
        shown_option("json_out", "--json", help="Print one JSON document (kvdoctor schema replay)."),
    ),
    before={"list_only": "output_dir", "json_out": "junit_path"},
)


def _given(ctx: typer.Context, name: str) -> bool:
    """NAME's option was on the command line (click's ParameterSource, read by name: Typer may vendor click)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def _listed(bug_ids: tuple[str, ...], every: bool) -> tuple[tuple[Replay, ...], tuple[Replay, ...]]:
    """(the cases, the pending ones) that --list shows: all, or those of BUG_IDS in the order given (a pending id
    is listed as pending); an unknown id, or --bug beside --all, is bad input, as it is for a run."""
    cases, waiting = replays.replays(), replays.pending()
    if not bug_ids:
        return cases, waiting
    chosen = select(bug_ids, every=every, pending=True)
    return tuple(r for r in chosen if r in cases), tuple(r for r in chosen if r in waiting)


def _list(bug_ids: tuple[str, ...], every: bool, json_out: bool) -> None:
    cases, waiting = _listed(bug_ids, every)
    if json_out:
        head = header("replay", exit_code=0, argv_fallback=["replay", "--list"])
        pending = [{"bug": r.bug, "fault": r.fault} for r in waiting]
        doc = {"count": len(cases), "cases": [replay_dict(r) for r in cases], "pending": pending}
        typer.echo(dumps(document(head, doc)), nl=False)
        return
    from rich.console import Console

    console = Console(highlight=False, emoji=False)
    rows = []
    for r in (*cases, *waiting):
        fault = r.fault or f"none (control {' '.join(r.control_args)})"
        fault += "" if r in cases else " (pending)"
        expect = r.expect.outcome.value + (f" {r.expect.line}" if r.expect.line else "")
        rows.append((r.bug, fault, r.scenario, r.model, r.topology, expect))
    columns = ("bug", "fault", "scenario", "model", "topology", "expect")
    print_rows(console, "kvdoctor replay: the cases", columns, rows)

    counted = f"{len(cases)} {noun_for(len(cases), 'case')}, {len(waiting)} pending"
    console.print(f"{counted} (every field: kvdoctor replay --list --json)", markup=False)


def print_rows(console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """ROWS under COLUMNS: a table when it fits CONSOLE whole (every cell on one line), else one block per row,
    the first cell (the bug id) on a line of its own and the others, ``column=value``, wrapped at spaces under it.
    Either way no id, fault, model or flag is ever folded mid-word (at 80 columns a table of six folding columns
    split ``sglang#23773`` into ``sglang#237`` / ``73``: an id a CI log cannot give back)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(*(safe(c) for c in row))
    if fits_whole(table, console):
        console.print(table)
        return
    console.print(Text(title))
    for row in rows:
        console.print(Text(printable(row[0]), style="bold", no_wrap=True, overflow="ignore"))
        named = zip((c.replace(" ", "-") for c in columns[1:]), row[1:], strict=True)  # a key stays one word
        fields = [f"{name}={printable(value)}" for name, value in named]
        for line in Text("  ".join(fields)).wrap(console, max(console.width - 2, 20)):
            line.rstrip()
            console.print(Text("  ") + line, no_wrap=True, overflow="ignore", crop=False)


class ReplayRun(ReplayJob, CommandRun["Matrix", "Report"]):
    """One ``kvdoctor replay``: :class:`kvdoctor.api.ReplayJob`'s steps (``kvdoctor.cli.command``), its progress on
    the console (stderr with ``--json``), then the table or the JSON, JUnit and the step summary."""

    def __init__(self, args: ReplayArgs, *, json_out: bool) -> None:
        super().__init__(args, on_event=self._event)
        self.json_out = json_out

    def check(self) -> None:
        from rich.console import Console

        super().check()
        self.console = Console(stderr=self.json_out, highlight=False)  # with --json, stdout is the JSON alone
        self.status = None if self.json_out else self.console

    def _event(self, phase: str, message: str) -> None:
        self.console.print(f"[{phase}] {message}", markup=False, soft_wrap=True)

    def deliver(self, result: Matrix) -> Report:
        published = self.report(result)
        if self.json_out:
            print(serialize.dumps(reportable.json_document(published)), end="")
        else:
            render(self.console, result)
        self.publish(published)
        return published


def render(console: Console, m: Matrix) -> None:
    """One row per bug (control, subject, first divergence, wall time), then the matrix's launches and time."""
    rows = []
    for v in m.verdicts:
        first = v.first_divergence
        where = "—"
        if first:
            by = " (logprobs)" if first.get("by") == "logprobs" else ""
            at = f"request {first['request']} token {first['position']}{by}, " if first["request"] is not None else ""
            named = str(first["component"]).split(", ")
            more = f" +{len(named) - 2} more" if len(named) > 2 else ""  # every one is in the JSON
            where = f"{at}{', '.join(named[:2])}{more} ({first['source']})"
        cells = (v.replay.bug, v.replay.fault or "none", v.replay.scenario, v.control.verdict, v.subject.verdict)
        cells += (where, f"{v.subject.wall_s:.0f}", v.status)
        rows.append(cells)
    columns = ("bug", "fault", "scenario", "control", "subject", "first divergence", "wall s", "row")
    print_rows(console, "kvdoctor replay", columns, rows)
    for v in m.verdicts:
        if not v.reproduced:
            console.print(f"{v.replay.bug}: {v.status}: {v.reason}", markup=False, soft_wrap=True)
    console.print(f"matrix: {m.launches} launches, {m.wall_s:.0f} s", markup=False)
