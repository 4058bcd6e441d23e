"""``kvdoctor replay``: public bugs replayed on real servers, each beside its green control (``kvdoctor.replay``).

``--bug ID`` (repeatable) or ``--all`` runs the cases; ``--list`` lists them (and the pending ones) without running
anything. Exit codes: 0 every chosen bug reproduced (control green, subject red or loud, each for the right
reason); 1 a bug not reproduced, or not run here; 2 bad input (checked before anything starts); 3 a deployment
failed unexpectedly; 130/143 after Ctrl-C/SIGTERM (everything started was stopped).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvdoctor.api._replay import DEFAULT_OUTPUT_DIR, ReplayJob
from kvdoctor.cli.command import CommandRun

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.replay.report import Report
    from kvdoctor.replay.run import Matrix


def replay(
    bug: Annotated[
        list[str] | None, typer.Option("--bug", help="A bug id to replay (sglang#23773); repeatable.")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Replay every bug that has a case.")] = False,
    list_only: Annotated[
        bool, typer.Option("--list", help="List the cases (and the pending ones); run nothing.")
    ] = False,
    output_dir: Annotated[
        Path, typer.Option("--output-dir", help="Run directories and the checkpoint cache go here.")
    ] = DEFAULT_OUTPUT_DIR,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds for each deployment's whole run.")] = 1800.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document (kvdoctor schema replay).")] = False,
    junit_path: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML, one case per bug.")] = None,
) -> None:
    """Replay public bugs inside real servers, each beside its control (docs/bugs.md).

    A bug's row passes only when the control is green and the subject red (or loud), each for the right reason."""
    if list_only:
        _list(json_out)
        return
    ReplayRun(tuple(bug or ()), every, output_dir, timeout, json_out=json_out, junit_path=junit_path)()


def _list(json_out: bool) -> None:
    from kvdoctor.core.replays import pending, replays
    from kvdoctor.replay.report import replay_dict

    cases = replays()
    if json_out:
        from kvdoctor.report.envelope import document, header
        from kvdoctor.report.serialize import dumps

        head = header("replay", exit_code=0, argv_fallback=["replay", "--list"])
        waiting = [{"bug": r.bug, "fault": r.fault} for r in pending()]
        doc = {"count": len(cases), "cases": [replay_dict(r) for r in cases], "pending": waiting}
        typer.echo(dumps(document(head, doc)), nl=False)
        return
    from rich.console import Console
    from rich.table import Table

    from kvdoctor.text import safe

    console = Console(highlight=False, emoji=False)
    table = Table(title="kvdoctor replay: the cases", title_justify="left")
    for column in ("bug", "fault", "scenario", "model", "topology", "expect"):
        table.add_column(column, overflow="fold")
    for r in (*cases, *pending()):
        fault = r.fault or f"none (control {' '.join(r.control_args)})"
        fault += "" if r in cases else " (pending)"
        expect = r.expect.outcome.value + (f" {r.expect.line}" if r.expect.line else "")
        table.add_row(*(safe(v) for v in (r.bug, fault, r.scenario, r.model, r.topology, expect)))
    console.print(table)
    console.print(f"{len(cases)} cases, {len(pending())} pending (every field: kvdoctor replay --list --json)")


class ReplayRun(ReplayJob, CommandRun["Matrix", "Report"]):
    """One ``kvdoctor replay``: :class:`kvdoctor.api.ReplayJob`'s steps (``kvdoctor.cli.command``), its progress on
    the console (stderr with ``--json``), then the table or the JSON, JUnit and the step summary."""

    def __init__(
        self,
        bugs: tuple[str, ...],
        every: bool,
        output_dir: Path,
        timeout: float,
        *,
        json_out: bool,
        junit_path: Path | None,
    ) -> None:
        super().__init__(bugs, every, output_dir, timeout, junit_path=junit_path, on_event=self._event)
        self.json_out = json_out

    def check(self) -> None:
        from rich.console import Console

        super().check()
        self.console = Console(stderr=self.json_out, highlight=False)  # with --json, stdout is the JSON alone
        self.status = None if self.json_out else self.console

    def _event(self, phase: str, message: str) -> None:
        self.console.print(f"[{phase}] {message}", markup=False, soft_wrap=True)

    def deliver(self, result: Matrix) -> Report:
        from kvdoctor.report import reportable, serialize

        published = self.report(result)
        if self.json_out:
            print(serialize.dumps(reportable.json_document(published)), end="")
        else:
            render(self.console, result)
        self.publish(published)
        return published


def render(console: Console, m: Matrix) -> None:
    """One row per bug (control, subject, first divergence, wall time), then the matrix's launches and time."""
    from rich.table import Table

    from kvdoctor.text import safe

    table = Table(title="kvdoctor replay", title_justify="left")
    for column in ("bug", "fault", "scenario", "control", "subject", "first divergence", "s", "row"):
        table.add_column(column, overflow="fold")
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
        table.add_row(*(safe(c) for c in cells))
    console.print(table)
    for v in m.verdicts:
        if not v.reproduced:
            console.print(f"{v.replay.bug}: {v.status}: {v.reason}", markup=False, soft_wrap=True)
    console.print(f"matrix: {m.launches} launches, {m.wall_s:.0f} s", markup=False)
