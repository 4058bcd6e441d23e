"""``kvdoctor bench pd-eval``: the eval client's own overhead against an instant server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvdoctor._exceptions import InputError, Interrupted
from kvdoctor.cli.errors import exit_on_error, say, signal_exit
from kvdoctor.cli.verdict import print_verdict
from kvdoctor.report import serialize
from kvdoctor.report.envelope import Verdict


def bench_pd_eval(
    data_path: Annotated[
        Path | None,
        typer.Option("--data-path", help="GSM8K test.jsonl (default: sha256-checked cache, bundled copy, download)."),
    ] = None,
    parallel: int = typer.Option(128, "--parallel", help="Requests in flight."),
    num_questions: int | None = typer.Option(
        None, "--num-questions", help="Scored questions (default: all after the shots)."
    ),
    repeats: int = typer.Option(3, "--repeats", help="Runs per client; medians are reported."),
    json_out: bool = typer.Option(False, "--json", help="Print the measurements as JSON."),
) -> None:
    """Time kvdoctor's eval client (sharded pools) next to a naive single-pool httpx client,
    both against an instant stand-in server in another process: wall, questions/s, client CPU."""
    with exit_on_error():
        from rich.console import Console
        from rich.table import Table

        from kvdoctor.bench.pd_eval import bench
        from kvdoctor.pd import gsm8k

        if parallel < 1 or repeats < 1:
            raise InputError("--parallel and --repeats must be >= 1")
        data = gsm8k.resolve_data(data_path)
        assert data is not None
        try:
            result = bench(data.path, parallel=parallel, num_questions=num_questions, repeats=repeats)
        except Interrupted as exc:  # the instant server is already stopped: the line every command ends a signal with
            line, code = signal_exit(exc.signum)
            say(line)
            raise typer.Exit(code) from None
        if json_out:
            print(serialize.dumps(result.to_dict()), end="")
            return
        console = Console()
        # Headers short and cells folding, so the table reads whole at 80 columns; the units are in
        # the header, the values are numbers as a person writes them.
        table = Table(
            title=f"pd-eval client: {result.questions:,} questions, "
            f"{result.parallel:,} in flight, median of {result.repeats:,}"
        )
        for column in ("client", "wall (s)", "questions/s", "client CPU (µs/request)", "CPU share of wall"):
            table.add_column(column, justify="right" if column != "client" else "left", overflow="fold")
        for loop in result.loops:
            table.add_row(
                loop.name,
                f"{loop.wall_s:,.2f}",
                f"{loop.per_second:,.0f}",
                f"{loop.cpu_us_per_request:,.0f}",
                f"{loop.client_cpu_s / loop.wall_s:.0%}",
            )
        console.print(table)
        sharded, single = result.loops
        console.print(
            f"data + prompts {result.prepare_s * 1e3:,.0f} ms; scoring {result.score_s * 1e3:,.0f} ms",
            highlight=False,
        )
        # A measurement, not a gate: it passes when both clients answered every question.
        print_verdict(
            console,
            Verdict.PASS,
            f"sharded pools vs one: {single.wall_s / sharded.wall_s:.2f}x faster wall, "
            f"{single.client_cpu_s / sharded.client_cpu_s:.2f}x less client CPU",
        )
