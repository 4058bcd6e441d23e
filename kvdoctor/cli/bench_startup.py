"""``kvdoctor bench startup``: inspect's start-up as process CPU time, beside the bare typer+rich floor."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from kvdoctor._exceptions import EXIT_PASS
from kvdoctor.bench.startup import FLOOR, run_startup_bench
from kvdoctor.cli.errors import exit_on_error
from kvdoctor.cli.progress import with_progress
from kvdoctor.cli.verdict import print_verdict
from kvdoctor.report import serialize
from kvdoctor.report.envelope import Verdict

if TYPE_CHECKING:
    from rich.console import Console

    from kvdoctor.bench.startup import StartupResult


def bench_startup(
    rounds: int = typer.Option(7, "--rounds", min=1, help="Interleaved rounds of every case; medians are reported."),
    json_out: bool = typer.Option(False, "--json", help="Print the measurements as JSON."),
) -> None:
    """Start-up CPU time of inspect and --help, each a fresh process, as a ratio to the typer+rich floor.

    The floor, `python -c "import typer, rich.console, rich.table"`, runs in the same interleaved rounds.
    Each process also runs once under -X importtime: the modules it loaded and its slowest imports.
    Exit 0 when every case ran; inspect above 1.5x the floor, or vLLM loaded for SGLang, is a warning.
    """
    with exit_on_error():
        from rich.console import Console

        result = with_progress(lambda update: run_startup_bench(rounds, progress=update), "bench startup")
        if json_out:
            print(serialize.dumps(result.to_dict()), end="")
            return
        render(result, Console())


def render(result: StartupResult, console: Console) -> None:
    """One row per case, what each process loaded under it, and the verdict line."""
    from rich.table import Table

    table = Table(title=f"start-up CPU time (user+sys) per process, median of {result.rounds:,} interleaved rounds")
    for column in ("case", "CPU s", "fastest s", "wall s", "x floor", "modules", "vLLM modules"):
        table.add_column(column, justify="left" if column == "case" else "right", no_wrap=column == "case")
    for case in result.cases:
        table.add_row(
            case.name,
            f"{case.cpu_median_s:.3f}",
            f"{case.cpu_min_s:.3f}",
            f"{case.wall_median_s:.3f}",
            f"{case.vs_floor:.2f}",
            f"{case.modules:,}",
            f"{len(case.vllm_modules):,}",
        )
    console.print(table)
    over, leaks = result.over_target(), result.vllm_leaks()
    for case in result.cases:
        slowest = ", ".join(f"{row.module} {row.self_ms:.0f} ms" for row in case.slowest_imports[:4])
        lines = [
            f"{case.name}: {case.command}",
            f"  heavy modules: {', '.join(case.heavy_modules) or 'none'}",
            f"  slowest imports (-X importtime, own wall time): {slowest}",
        ]
        if case in leaks:
            lines.append(f"  vLLM modules loaded for an SGLang question: {', '.join(case.vllm_modules)}")
        for line in lines:
            console.print(line, highlight=False, markup=False)
    inspect = result.case("inspect")
    detail = (
        f"inspect {inspect.vs_floor:.2f}x the floor ({inspect.cpu_median_s:.3f} s vs "
        f"{result.case(FLOOR).cpu_median_s:.3f} s CPU; target <= {result.target:g}x)"
    )
    if over:
        detail += "; over the target: " + ", ".join(f"{c.name} {c.vs_floor:.2f}x" for c in over)
    if leaks:
        detail += "; vLLM loaded for an SGLang question: " + ", ".join(c.name for c in leaks)
    # A measurement, not a gate: exit 0 whenever every case ran; the target and the vLLM check are warnings.
    print_verdict(console, Verdict.of(EXIT_PASS, warnings=len(over) + len(leaks)), detail)
