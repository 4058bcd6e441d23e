"""``kvdoctor bench roundtrip``: offload/restore bandwidth, ours vs the server's per-layer copy."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import typer

from kvdoctor._exceptions import EXIT_GATE
from kvdoctor.choices import Device
from kvdoctor.cli.errors import exit_on_error
from kvdoctor.cli.launch import launch_line
from kvdoctor.cli.progress import Update, with_progress
from kvdoctor.cli.typed_command import command, shown_option
from kvdoctor.cli.verdict import print_verdict
from kvdoctor.core.declared import argument, group, option
from kvdoctor.engines import GPU_ARCH_HELP, Capability, Engine, GpuArch, require
from kvdoctor.report.envelope import Verdict
from kvdoctor.report.units import NONE, noun_for
from kvdoctor.roundtrip.options import BenchOptions
from kvdoctor.text import safe


def render(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    title = (
        f"bench roundtrip: {safe(report['model'])} | kv {report['kv_cache_dtype']} | {report['device']} | "
        f"{report['requests']} {noun_for(report['requests'], 'request')} x {report['tokens']} tokens | "
        f"{report['bytes_per_round'] / 2**20:,.1f} MiB per round"
    )
    console.print(title, highlight=False)
    table = Table(title_justify="left")
    for col in ("path", "direction", "GB/s (median)", "GB/s (best)", "median", "vs naive (best)", "vs pinned"):
        table.add_column(col, overflow="fold")
    for r in report["rows"]:
        table.add_row(
            r["path"],
            r["direction"],
            f"{r['gbps']:,.2f}",
            f"{r['best_gbps']:,.2f}",
            f"{r['median_s'] * 1e3:,.1f} ms",
            NONE if r["vs_naive"] is None else f"{r['vs_naive']:.2f}x",
            NONE if r["vs_pinned"] is None else f"{r['vs_pinned']:.0%}",
        )
    console.print(table)
    match = "[green]identical[/]" if report["bytes_match"] else "[bold red]DIFFER[/]"
    console.print(
        f"backup bytes, ours vs naive: {match}; offload {report['offload_speedup']:.2f}x, "
        f"restore {report['restore_speedup']:.2f}x the naive copy"
    )
    for name, ratios in report.get("versus", {}).items():
        console.print(
            f"ours vs {safe(name)}'s own path (best GB/s): offload {ratios['offload']:.2f}x, "
            f"restore {ratios['restore']:.2f}x",
            highlight=False,
        )
    for note in report["used"].get("sglang_notes", []):
        console.print(f"note: {safe(note)} (SGLang's MXFP8 scale stores are Triton kernels)", highlight=False)
    verdict = Verdict.of(0 if report["bytes_match"] else 1)
    detail = "both paths back up identical bytes" if report["bytes_match"] else "the backups' bytes differ"
    print_verdict(console, verdict, detail)


@dataclass(frozen=True)
class BenchRoundtripArgs:
    """``bench roundtrip``'s options, each declared once: what it times (``roundtrip.options.BenchOptions``, a group)
    on which model, beside whose copy path."""

    model: str = argument(help="config.json path, model directory, fixture or Hub id.", default="inkling-small")
    bench: BenchOptions = group(BenchOptions)
    engine: Engine = option(
        Engine.KVDOCTOR,
        "--engine",
        help="sglang: also time SGLang's own backup_kv_cache/restore_kv_cache in the same rounds.",
    )
    gpu_arch: GpuArch = option(GpuArch.SM100, "--gpu-arch", help=GPU_ARCH_HELP)


def _bench(ctx: typer.Context, args: BenchRoundtripArgs, *, json_output: bool) -> None:
    with exit_on_error():
        from kvdoctor.core.sglang.analysis import analyze  # SGLang's rule model: not loaded by --help

        adapter = require(args.engine, Capability.BENCH_ROUNDTRIP)
        line = launch_line(ctx, args.model, default_model="inkling-small")
        flags = list(line.server_argv) or ["--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode"]
        analysis = analyze(line.model, flags, platform=args.gpu_arch.platform())  # pure: refused before torch loads
        options = replace(args.bench, device=Device(args.bench.device).value)

        def work(update: Update | None) -> Any:
            from kvdoctor.bench.roundtrip import bench_roundtrip as run  # torch: loaded under the progress bar

            extra, used = adapter.bench_paths(line.model, flags, options, args.gpu_arch, update)
            result = run(analysis, options, extra, update)
            result.used.update(used)
            return result

        result = work(None) if json_output else with_progress(work, adapter.first_step)
    report = result.to_json()
    if json_output:
        typer.echo(json.dumps(report, indent=2, default=str))
    else:
        render(report)
    if not result.bytes_match:
        raise typer.Exit(EXIT_GATE)


bench_roundtrip = command(
    BenchRoundtripArgs,
    _bench,
    name="bench_roundtrip",
    doc="""Offload and restore bandwidth of kvdoctor's copy engine vs SGLang's per-layer copy, one run.

    SGLang server flags may follow MODEL; with none, the Inkling MXFP8 decode setup is used.
    """,
    shown=(shown_option("json_output", "--json", help="Print one JSON object instead of a table."),),
    before="engine",
    parse_as={"device": Device},
)
