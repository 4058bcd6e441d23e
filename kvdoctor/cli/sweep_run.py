"""``kvdoctor sweep``'s run on the terminal: :class:`kvdoctor.api.SweepJob`'s steps with progress, the plan, the
matrix and what was found, and ``kvdoctor sweep merge``. Loaded by ``kvdoctor.cli.sweep_cmd`` when a sweep runs
(its options are declared there, cheap for ``--help``); everything it needs is imported here, at its head."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from kvdoctor._exceptions import InputError
from kvdoctor.api._job import ErrorCase, check_reports
from kvdoctor.api._sweep import SweepJob
from kvdoctor.cli.command import CommandRun
from kvdoctor.consistency.workload import Workload
from kvdoctor.report import reportable, serialize
from kvdoctor.report.envelope import document, header
from kvdoctor.sweep import page
from kvdoctor.sweep.cell import Verdict
from kvdoctor.sweep.covering import shard as share
from kvdoctor.sweep.merge import merge, read
from kvdoctor.sweep.report import COMMAND, Report, plan_body
from kvdoctor.sweep.result import SweepResult
from kvdoctor.sweep.run import Sweeper, SweepOptions
from kvdoctor.text import safe

__all__ = ["MergeRun", "SweepOptions", "SweepRun", "Workload", "render"]


class _Printing:
    json_out: bool

    def _console(self) -> Console:
        return Console(stderr=self.json_out, highlight=False)

    def _event(self, phase: str, message: str) -> None:
        self.console.print(f"[{phase}] {message}", markup=False, soft_wrap=True)

    def _deliver(self, published: Report) -> None:
        if self.json_out:
            print(serialize.dumps(reportable.json_document(published)), end="")
        else:
            render(self.console, published.result)


class SweepRun(_Printing, CommandRun["SweepResult", "Report"]):
    """One ``kvdoctor sweep``: :class:`kvdoctor.api.SweepJob`'s steps, progress on stderr with ``--json``."""

    def __init__(
        self, options: SweepOptions, *, plan_only: bool, json_out: bool, junit_path: Path | None, html_path: Path | None
    ) -> None:
        self.plan_only, self.json_out = plan_only, json_out
        if plan_only and (junit_path or html_path):
            raise InputError("--plan runs nothing, so --junit and --html have nothing to write")
        self.job = SweepJob(
            options,
            junit_path=junit_path,
            html_path=html_path,
            on_event=self._event,
            environment=not plan_only,
        )

    def check(self) -> None:
        self.console = self._console()
        self.status = None if self.json_out else self.console
        self.job.check()

    def preflight(self) -> None:
        if not self.plan_only:
            self.job.preflight()

    def error_case(self) -> ErrorCase | None:
        return None if self.plan_only else self.job.error_case()

    def work(self) -> SweepResult | None:
        if self.plan_only:
            _print_plan(self.job.sweeper, json_out=self.json_out, console=self.console)
            return None
        return self.job.work()

    def deliver(self, result: SweepResult) -> Report:
        published = self.job.report(result)
        self._deliver(published)
        self.job.publish(published)
        return published


class MergeRun(_Printing, CommandRun["SweepResult", "Report"]):
    """``kvdoctor sweep merge REPORT...``: the shards' reports as one."""

    def __init__(self, paths: tuple[Path, ...], *, json_out: bool, junit_path: Path | None, html_path: Path | None):
        self.paths, self.json_out, self.junit_path, self.html_path = paths, json_out, junit_path, html_path

    def check(self) -> None:
        self.console = self._console()
        self.status = None if self.json_out else self.console
        self.docs = [(p, read(p)) for p in self.paths]

    def preflight(self) -> None:
        check_reports(self.junit_path)
        if self.html_path is not None:
            check_reports(self.html_path)

    def work(self) -> SweepResult:
        return merge(self.docs)

    def deliver(self, result: SweepResult) -> Report:
        published = Report(result)
        self._deliver(published)
        reportable.publish(published, junit_path=self.junit_path)
        if self.html_path is not None:
            page.write(self.html_path, result, verdict=published.verdict.word)
        return published


def _print_plan(sweeper: Sweeper, *, json_out: bool, console: Console) -> None:
    """--plan: the space, what was refused, and every configuration with its index (the shards split by index)."""
    body = plan_body(sweeper)
    if sweeper.o.shard:
        mine = {i for i, _ in share(sweeper.plan(), sweeper.o.shard)}
        body["plan"]["configurations"] = [c for c in body["plan"]["configurations"] if c["index"] in mine]
    if json_out:
        typer.echo(
            serialize.dumps(document(header(COMMAND, exit_code=0, argv_fallback=[COMMAND, "--plan"]), body)), nl=False
        )
        return
    p = console.print
    space = body["space"]
    p(
        f"kvdoctor sweep: {', '.join(body['models'])} · {body['server']} · {body['topology']} · scenarios "
        f"{', '.join(body['scenarios'])}",
        markup=False,
        soft_wrap=True,
    )
    p(f"space ({space['source']}): {len(space['factors'])} flags; strength {body['strength']}", markup=False)
    for f in space["factors"]:
        values = ", ".join(str(v) for v in f["values"])
        where = " [every server]" if f.get("shared") else ""
        p(f"  {f['flag']}: {values} (default {f['default']}){where}: {f['why']}", markup=False, soft_wrap=True)
    for x in body["refused"]:
        p(f"refused: {x['what']}: {x['reason']}", markup=False, soft_wrap=True)
    configs = body["plan"]["configurations"]
    p(
        f"plan: {len(configs)} configurations × {len(body['scenarios'])} scenarios × {len(body['models'])} models",
        markup=False,
    )
    for c in configs:
        p(f"  {c['index']:>3}  {c['label']}", markup=False, soft_wrap=True)


def render(console: Console, r: SweepResult) -> None:
    """The matrix (a row per configuration, a column per model and scenario), then per red cell what was found."""
    style = {
        Verdict.GREEN: "green",
        Verdict.RED: "bold red",
        Verdict.LOUD: "bold magenta",
        Verdict.VACUOUS: "yellow",
        Verdict.REFUSED: "dim",
        Verdict.ERROR: "bold",
        Verdict.NOT_RUN: "dim",
    }
    columns = [(m, s) for m in r.models for s in r.scenarios]
    by = {c.key: c for c in r.cells}
    table = Table(title=f"kvdoctor sweep: {r.server} · {r.topology}", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("configuration")
    for m, s in columns:
        table.add_column(f"{m}\n{s}" if len(r.models) > 1 else s)
    for i in sorted({c.index for c in r.cells}):
        row = [str(i), safe(r.plan[i].label(r.space))]
        for m, s in columns:
            c = by.get((m, s, i))
            row.append(f"[{style[c.verdict]}]{c.verdict.value}[/]" if c is not None else "")
        table.add_row(*row)
    console.print(table)
    p = console.print
    for c in r.cells:
        if not c.verdict.finding:
            continue
        p(f"{c.verdict.value}: {c.model} · {c.scenario} · {c.label}: {c.reason}", markup=False, soft_wrap=True)
        m = r.minimized_for(c)
        if m is not None:
            p(f"  {m.words}; red in {m.red} of {m.runs} runs; {m.release_words}", markup=False, soft_wrap=True)
            if m.bundle:
                p(f"  bundle: {m.bundle}", markup=False, soft_wrap=True)
        if c.run_dir:
            p(f"  run: {c.run_dir}", markup=False, soft_wrap=True)
    for x in r.refused:
        p(f"refused: {x.what}: {x.reason}", markup=False, soft_wrap=True)
    cov = r.coverage
    p(f"coverage: {cov.covered}/{cov.total} {cov.strength}-tuples of flag values met", markup=False)
    t = r.timings
    p(
        f"timings: plan {t.get('plan_s', 0):.2f} s, cells {t.get('cells_s', 0):.0f} s, minimization "
        f"{t.get('minimize_s', 0):.0f} s, wall {t.get('wall_s', 0):.0f} s",
        markup=False,
    )
    for w in r.warnings:
        p(f"warning: {w}", markup=False, soft_wrap=True)
