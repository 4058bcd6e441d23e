"""``kvdoctor bench consistency MODEL [options] [-- SGLANG FLAGS]``: one real consistency run, timed by itself.

The run is ``kvdoctor consistency``'s own (its checks, launch plan, supervisor and result: this command is
:class:`~kvdoctor.cli.consistency.ConsistencyRun` with another delivery); the numbers are the timeline the
run recorded (``kvdoctor.bench.consistency``). Exit codes: 0 measured, the run passed (over the 6-minute
target: a warning); 1 the run failed a gate (measured when it retracted; no number when it retracted
nothing); 2 bad input; 3 the deployment failed (no number); 130/143 interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kvdoctor.bench.consistency import BenchReport, measure
from kvdoctor.cli.command import ErrorCase
from kvdoctor.cli.consistency import ConsistencyRun
from kvdoctor.cli.typed_command import command, shown_option
from kvdoctor.consistency.prepared import ConsistencyOptions
from kvdoctor.consistency.report import Report
from kvdoctor.report import reportable, serialize
from kvdoctor.text import shown

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.bench.consistency import BenchReport, ConsistencyBench
    from kvdoctor.consistency.result import ConsistencyResult


def _bench(ctx: typer.Context, options: ConsistencyOptions, *, json_out: bool) -> None:
    BenchConsistencyRun(ctx, options, dry_run=False, json_out=json_out)()


bench_consistency = command(
    ConsistencyOptions,
    _bench,
    name="bench_consistency",
    doc="""One real consistency run, timed by itself: start-up per server, each burst's tok/s, total time.

    Ratios from that one run side by side: pressured vs reference tok/s, start-up's share of the total,
    the total against issue 18's 6-minute target. No number from a run that failed to deploy or never
    retracted. SGLang flags after `--` go to every server.""",
    # consistency's options but the server, the faults, the scenario and the reports: the bench times SGLang's
    # default run, and leaves no JUnit file (its JSON is the bench's)
    only=(
        "model",
        "shrink",
        "topology",
        "device",
        "requests",
        "prompt_tokens",
        "max_new_tokens",
        "concurrency",
        "seed",
        "output_dir",
        "timeout",
    ),
    shown=(shown_option("json_out", "--json", help="Print the measurements as JSON."),),
)


class BenchConsistencyRun(ConsistencyRun):
    """``kvdoctor consistency``'s run (check, preflight, work), delivered as the bench's table or JSON."""

    def error_case(self) -> ErrorCase | None:
        return None  # a bench leaves no JUnit error case or step summary

    def deliver(self, result: ConsistencyResult) -> BenchReport:  # type: ignore[override]
        if result.run_dir:  # the measured run's own record, beside its logs, whatever the bench makes of it
            serialize.write(Path(result.run_dir) / "result.json", reportable.json_document(Report(result)))
        bench = measure(result)  # no subject: one line and the documented code, never a number
        if result.run_dir:
            serialize.write(Path(result.run_dir) / "bench.json", bench.to_dict())
        if self.json_out:
            print(serialize.dumps(bench.to_dict()), end="")
        else:
            render(bench, self.console)
        return BenchReport(bench)


def render(bench: ConsistencyBench, console: Console) -> None:
    """Three tables (servers, phases, bursts) and the ratios, narrow enough for 80 columns."""
    from rich.table import Table

    p = console.print
    w = bench.workload
    shrunk = ", shrunk" if bench.shrunk else ""
    p(
        f"bench consistency: {shown(bench.model)}{shrunk} · {bench.topology} · {bench.device} · "
        f"{w['requests']} × ({w['prompt_tokens']} + {w['max_new_tokens']}) tokens, {w['concurrency']} in flight · "
        f"{bench.cpus} cores",
        markup=False,
        highlight=False,
    )
    servers = Table(title="launch to ready, per server (all launched at once)", title_justify="left")
    for column in ("server", "launched (s)", "ready (s)", "launch to ready (s)"):
        servers.add_column(column, justify="left" if column == "server" else "right", overflow="fold")
    for s in bench.servers:
        servers.add_row(shown(s.role), f"{s.launched_s:,.1f}", f"{s.ready_s:,.1f}", f"{s.seconds:,.1f}")
    p(servers)
    phases = Table(title="phases, back to back", title_justify="left")
    for column in ("phase", "from (s)", "seconds", "share"):
        phases.add_column(column, justify="left" if column == "phase" else "right", overflow="fold")
    for ph in bench.phases:
        phases.add_row(ph.name, f"{ph.start_s:,.1f}", f"{ph.seconds:,.1f}", f"{ph.share:.0%}")
    phases.add_row("(between phases)", "", f"{bench.untimed_s:,.1f}", f"{bench.untimed_s / bench.total_s:.0%}")
    phases.add_row("total", "", f"{bench.total_s:,.1f}", "100%")
    p(phases)
    bursts = Table(title="bursts (the whole workload each)", title_justify="left")
    for column in ("burst", "wall (s)", "output tokens", "tok/s", "retractions"):
        bursts.add_column(column, justify="left" if column == "burst" else "right", overflow="fold")
    for b in bench.bursts:
        tok_s = f"{b.tokens_per_s:,.1f}"
        bursts.add_row(b.name, f"{b.wall_s:,.1f}", f"{b.output_tokens:,}", tok_s, f"{b.retractions:,}")
    p(bursts)
    r = bench.ratios
    p(
        f"side by side, this run: pressured {r.pressured_vs_reference:.2f}x the reference's tok/s (the reference's "
        f"repeat {r.repeat_vs_reference:.2f}x itself); start-up {bench.startup_s:,.0f} s, {r.startup_share:.0%} of "
        f"the total; total {bench.total_s:,.0f} s, {r.vs_target:.2f}x issue 18's {bench.target_s:,.0f} s target "
        f"({bench.target_cpus} cores; here {bench.cpus})",
        markup=False,
        highlight=False,
    )
    for warning in bench.warnings:
        p(f"warning: {warning}", markup=False, highlight=False)
