"""``kvdoctor bench replay``: the replay matrix's wall time beside one launch per case, measured in one run
(``kvdoctor.bench.replay``). Exit codes: 0 measured, every bug reproduced in both layouts; 1 a bug not reproduced
(or the layouts disagree); 2 bad input (before anything starts); 3 a deployment failed; 130/143 interrupted."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import typer

from kvdoctor._exceptions import InputError
from kvdoctor.api._job import names
from kvdoctor.api._replay import ReplayArgs
from kvdoctor.bench.replay import BenchReport, measure
from kvdoctor.cli.command import CommandRun, check_reports
from kvdoctor.cli.typed_command import command, shown_option
from kvdoctor.replay import run as replay_run
from kvdoctor.replay.plan import select
from kvdoctor.report import serialize

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.bench.replay import BenchReport, ReplayBench
    from kvdoctor.replay.run import Matrix


def _bench(ctx: typer.Context, args: ReplayArgs, *, json_out: bool) -> None:
    BenchReplayRun(args, json_out)()


bench_replay = command(
    ReplayArgs,
    _bench,
    name="bench_replay",
    doc="""Replay the bugs as the matrix does (cases sharing a deployment on one launch), then each case on a launch
    of its own, and put the two wall times side by side (the ratio, and the matrix against the 20-minute target).""",
    only=("bug", "every", "output_dir", "timeout"),  # replay's options but its report (the bench's JSON is its own)
    shown=(shown_option("json_out", "--json", help="Print the measurements as JSON."),),
)


class BenchReplayRun(CommandRun["tuple[Matrix, Matrix]", "BenchReport"]):
    def __init__(self, args: ReplayArgs, json_out: bool) -> None:
        self.bugs, self.every, self.json_out = names(args.bug), args.every, json_out
        self.output_dir, self.timeout = args.output_dir, args.timeout_s

    def check(self) -> None:
        from rich.console import Console

        if not self.timeout > 0:
            raise InputError(f"--timeout must be > 0 seconds, got {self.timeout}")
        self.chosen = select(self.bugs, every=self.every)
        self.console = Console(stderr=self.json_out, highlight=False)
        self.status = None if self.json_out else self.console

    def preflight(self) -> None:
        self.runner = replay_run.RealRunner()
        self.runner.check_environment(self.chosen, "kvdoctor bench replay")
        check_reports(None, self.output_dir)

    def work(self) -> tuple[Matrix, Matrix]:
        runner, settings = self.runner, replay_run.Settings(self.output_dir, self.timeout)
        grouped = replay_run.prepare(self.chosen, settings, runner)  # both layouts checked before either starts
        alone = replay_run.prepare(self.chosen, settings, runner, separate=True)
        say = self._event
        return replay_run.run(grouped, runner, notify=say), replay_run.run(alone, runner, notify=say)

    def _event(self, phase: str, message: str) -> None:
        self.console.print(f"[{phase}] {message}", markup=False, soft_wrap=True)

    def deliver(self, result: tuple[Matrix, Matrix]) -> BenchReport:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0
        bench = measure(*result, cpus)
        if self.json_out:
            print(serialize.dumps(bench.to_dict()), end="")
        else:
            render(bench, self.console)
        return BenchReport(bench)


def render(bench: ReplayBench, console: Console) -> None:
    from rich.table import Table

    table = Table(title=f"bench replay: {len(bench.bugs)} bugs · {bench.cpus} cores", title_justify="left")
    for column in ("layout", "wall (s)", "launches", "reproduced"):
        table.add_column(column, justify="left" if column == "layout" else "right", overflow="fold")
    for lay in (bench.matrix, bench.separate):
        table.add_row(lay.name, f"{lay.wall_s:,.1f}", str(lay.launches), f"{lay.reproduced}/{len(bench.bugs)}")
    console.print(table)
    console.print(
        f"side by side, this run: one launch per case took {bench.ratio:.2f}x the matrix; the matrix "
        f"{bench.vs_target:.2f}x the {bench.target_s / 60:.0f}-minute target ({bench.target_cpus} cores; here "
        f"{bench.cpus})",
        markup=False,
    )
    for warning in bench.warnings:
        console.print(f"warning: {warning}", markup=False)
