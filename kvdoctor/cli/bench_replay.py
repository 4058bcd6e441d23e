"""``kvdoctor bench replay``: the replay matrix's wall time beside one launch per case, measured in one run
(``kvdoctor.bench.replay``). Exit codes: 0 measured, every bug reproduced in both layouts; 1 a bug not reproduced
(or the layouts disagree); 2 bad input (before anything starts); 3 a deployment failed; 130/143 interrupted."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvdoctor._exceptions import InputError
from kvdoctor.cli.command import CommandRun, check_reports
from kvdoctor.cli.replay_cmd import DEFAULT_OUTPUT_DIR

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.bench.replay import BenchReport, ReplayBench
    from kvdoctor.replay.run import Matrix


def bench_replay(
    bug: Annotated[list[str] | None, typer.Option("--bug", help="A bug id to replay; repeatable.")] = None,
    every: Annotated[bool, typer.Option("--all", help="Every bug that has a case.")] = False,
    output_dir: Annotated[
        Path, typer.Option("--output-dir", help="Run directories and the checkpoint cache go here.")
    ] = DEFAULT_OUTPUT_DIR,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds for each deployment's whole run.")] = 1800.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print the measurements as JSON.")] = False,
) -> None:
    """Replay the bugs as the matrix does (cases sharing a deployment on one launch), then each case on a launch
    of its own, and put the two wall times side by side (the ratio, and the matrix against the 20-minute target)."""
    BenchReplayRun(tuple(bug or ()), every, output_dir, timeout, json_out)()


class BenchReplayRun(CommandRun["tuple[Matrix, Matrix]", "BenchReport"]):
    def __init__(self, bugs: tuple[str, ...], every: bool, output_dir: Path, timeout: float, json_out: bool) -> None:
        self.bugs, self.every, self.output_dir, self.timeout, self.json_out = bugs, every, output_dir, timeout, json_out

    def check(self) -> None:
        from rich.console import Console

        from kvdoctor.replay.plan import select

        if not self.timeout > 0:
            raise InputError(f"--timeout must be > 0 seconds, got {self.timeout}")
        self.chosen = select(self.bugs, every=self.every)
        self.console = Console(stderr=self.json_out, highlight=False)
        self.status = None if self.json_out else self.console

    def preflight(self) -> None:
        from kvdoctor.replay.run import RealRunner

        self.runner = RealRunner()
        self.runner.check_environment(self.chosen, "kvdoctor bench replay")
        check_reports(None, self.output_dir)

    def work(self) -> tuple[Matrix, Matrix]:
        from kvdoctor.replay.run import Settings, prepare, run

        runner, settings = self.runner, Settings(self.output_dir, self.timeout)
        grouped = prepare(self.chosen, settings, runner)  # both layouts checked before either starts
        alone = prepare(self.chosen, settings, runner, separate=True)
        say = self._event
        return run(grouped, runner, notify=say), run(alone, runner, notify=say)

    def _event(self, phase: str, message: str) -> None:
        self.console.print(f"[{phase}] {message}", markup=False, soft_wrap=True)

    def deliver(self, result: tuple[Matrix, Matrix]) -> BenchReport:
        from kvdoctor.bench.replay import BenchReport, measure
        from kvdoctor.report import serialize

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
