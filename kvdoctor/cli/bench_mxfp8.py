"""`kvdoctor bench mxfp8`: MXFP8 codec throughput, side by side with a plain fp8 cast."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Annotated

import typer

from kvdoctor._exceptions import InputError
from kvdoctor.choices import Device, MxfpBackend, ScaleMode, TorchDtype
from kvdoctor.cli.errors import exit_on_error
from kvdoctor.cli.options import DeviceOption
from kvdoctor.cli.verdict import print_verdict
from kvdoctor.report.envelope import Verdict
from kvdoctor.report.units import NONE, format_bytes
from kvdoctor.text import safe

if TYPE_CHECKING:
    from kvdoctor.bench.mxfp8 import BenchResult


def bench_mxfp8(
    size: Annotated[str, typer.Option(help="Input size, e.g. 64MiB, 1GiB (default: 1GiB on CUDA, 64MiB on CPU).")] = "",
    backend: Annotated[MxfpBackend, typer.Option(help="Which codec implementations to time (all: both).")] = (
        MxfpBackend.ALL
    ),
    scale_mode: Annotated[ScaleMode, typer.Option(help="How each block's E8M0 scale is rounded.")] = ScaleMode.SGLANG,
    device: DeviceOption = Device.AUTO,
    dtype: Annotated[TorchDtype, typer.Option(help="The input tensor's dtype.")] = TorchDtype.BFLOAT16,
    repeats: Annotated[int, typer.Option(min=1, help="Timed calls per row (median).")] = 10,
    peak_gbps: Annotated[
        float | None,
        typer.Option(
            help="Peak memory bandwidth for the traffic floor (GB/s); 0 or less: as if not given.",
            show_default="the GPU's spec-table figure, else a measured device copy",
        ),
    ] = None,
    sweep: Annotated[bool, typer.Option(help="CUDA: also time the quantize kernel at several tile shapes.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Quantize / dequantize throughput per backend as GB/s and fraction of the traffic floor.

    Every choice is an enum Typer checks before torch is imported, so a typo costs nothing.
    """
    with exit_on_error():
        import torch

        where = device.value
        if device is Device.AUTO:
            where = "cuda" if torch.cuda.is_available() else "cpu"
        elif device is Device.CUDA and not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device is available (torch.cuda.is_available() is False)")
        if where == "cpu" and "triton" in backend.names():
            os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported
        from kvdoctor.bench.mxfp8 import parse_size, run_mxfp8_bench

        size_bytes = parse_size(size or ("1GiB" if where == "cuda" else "64MiB"))
        result = run_mxfp8_bench(
            size_bytes=size_bytes,
            device=where,
            dtype=getattr(torch, dtype.value),
            scale_mode=scale_mode.value,
            backends=backend.names(),
            repeats=repeats,
            peak_gbps=peak_gbps if peak_gbps and peak_gbps > 0 else None,
            sweep=sweep,
        )
        if as_json:
            typer.echo(json.dumps(result.to_dict(), indent=2))
        else:
            render(result)


def render(result: BenchResult) -> None:
    """A rich table: one row per (op, backend)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    title = (
        f"MXFP8 codec on {safe(result.device)}: {format_bytes(result.input_bytes)} "
        f"{result.dtype}, scale mode {result.scale_mode}"
    )
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)  # light borders: more room at 80 columns
    # Numbers never break; the backend cell carries the row's note and wraps at its spaces when narrow.
    for name, justify, whole in [
        ("op", "left", True),
        ("backend (note)", "left", False),
        ("elems", "right", True),
        ("time", "right", True),
        ("GB/s", "right", True),
        ("of floor", "right", False),
        ("x cast", "right", True),
        ("= ref", "center", True),
    ]:
        width = 10 if name.startswith("backend") else None
        table.add_column(name, justify=justify, no_wrap=whole, overflow="fold", min_width=width)  # type: ignore[arg-type]
    for r in result.rows:
        table.add_row(
            r.op,
            safe(f"{r.backend} ({r.note})" if r.note else r.backend),
            _count(r.elements),
            _duration(r.median_s),
            f"{r.gbps:,.1f}",
            NONE if r.floor_fraction is None else f"{r.floor_fraction:.0%}",
            NONE if r.vs_cast is None else (f"{r.vs_cast:,.0f}" if r.vs_cast >= 100 else f"{r.vs_cast:.2f}"),
            {None: NONE, True: "yes", False: "[red]NO[/red]"}[r.bytes_match],
        )
    console = Console(highlight=False)  # COLUMNS when piped; cells fold rather than being cut
    console.print(table)
    peak = "unknown" if result.peak_gbps is None else f"{result.peak_gbps:,.0f} GB/s"
    console.print(
        f"floor = bytes read + written at {peak} ({result.peak_source}); "
        "quantize moves in+1+1/32 B/elem, dequantize 1+1/32+out B/elem"
    )
    for note in result.notes:
        console.print(f"note: {safe(note)}")
    wrong = [f"{r.op} {r.backend}" for r in result.rows if r.bytes_match is False]
    detail = (
        f"bytes differ from the reference: {', '.join(wrong)}" if wrong else "every codec's bytes equal the reference"
    )
    print_verdict(console, Verdict.of(0, warnings=len(wrong)), detail)  # timings are reported, never gated


def _duration(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _count(n: int) -> str:
    for unit, size in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)
