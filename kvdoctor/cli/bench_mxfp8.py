"""`kvdoctor bench mxfp8`: MXFP8 codec throughput, side by side with a plain fp8 cast."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from kvdoctor._exceptions import InputError
from kvdoctor.cli.errors import exit_on_error

if TYPE_CHECKING:
    from kvdoctor.bench.mxfp8 import BenchResult

DTYPES = ("bfloat16", "float16", "float32")


def bench_mxfp8(
    size: Annotated[str, typer.Option(help="Input size, e.g. 64MiB, 1GiB (default: 1GiB on CUDA, 64MiB on CPU).")] = "",
    backend: Annotated[str, typer.Option(help="all | torch | triton")] = "all",
    scale_mode: Annotated[str, typer.Option(help="sglang | rceil | floor")] = "sglang",
    device: Annotated[str, typer.Option(help="auto | cpu | cuda")] = "auto",
    dtype: Annotated[str, typer.Option(help="bfloat16 | float16 | float32")] = "bfloat16",
    repeats: Annotated[int, typer.Option(min=1, help="Timed calls per row (median).")] = 10,
    peak_gbps: Annotated[
        float, typer.Option(help="Peak bandwidth for the floor (GB/s); default: spec table, else measured copy.")
    ] = 0,
    sweep: Annotated[bool, typer.Option(help="CUDA: also time the quantize kernel at several tile shapes.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Quantize / dequantize throughput per backend as GB/s and fraction of the traffic floor."""
    with exit_on_error():
        import torch

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device not in ("cpu", "cuda"):
            raise InputError(f"--device must be auto, cpu or cuda, not {device!r}")
        if dtype not in DTYPES:
            raise InputError(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
        backends = {"all": ("torch", "triton"), "torch": ("torch",), "triton": ("triton",)}
        if backend not in backends:
            raise InputError(f"--backend must be all, torch or triton, not {backend!r}")
        if device == "cpu" and "triton" in backends[backend]:
            os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported
        from kvdoctor.bench.mxfp8 import parse_size, run_mxfp8_bench
        from kvdoctor.mxfp8 import SCALE_MODES

        if scale_mode not in SCALE_MODES:
            raise InputError(f"--scale-mode must be one of {', '.join(SCALE_MODES)}")
        size_bytes = parse_size(size or ("1GiB" if device == "cuda" else "64MiB"))
        result = run_mxfp8_bench(
            size_bytes=size_bytes,
            device=device,
            dtype=getattr(torch, dtype),
            scale_mode=scale_mode,
            backends=backends[backend],
            repeats=repeats,
            peak_gbps=peak_gbps or None,
            sweep=sweep,
        )
        if as_json:
            typer.echo(json.dumps(result.to_dict(), indent=2))
        else:
            render(result)


def render(result: BenchResult) -> None:
    """A rich table: one row per (op, backend)."""
    from rich.console import Console
    from rich.table import Table

    title = (
        f"MXFP8 codec on {result.device}: {result.input_bytes / 2**20:.0f} MiB "
        f"{result.dtype}, scale mode {result.scale_mode}"
    )
    table = Table(title=title)
    for name, justify in [
        ("op", "left"),
        ("backend", "left"),
        ("elems", "right"),
        ("time", "right"),
        ("GB/s", "right"),
        ("of floor", "right"),
        ("x cast", "right"),
        ("bytes = ref", "center"),
        ("note", "left"),
    ]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in result.rows:
        table.add_row(
            r.op,
            r.backend,
            _count(r.elements),
            _duration(r.median_s),
            f"{r.gbps:,.1f}",
            "" if r.floor_fraction is None else f"{r.floor_fraction:.0%}",
            "" if r.vs_cast is None else f"{r.vs_cast:.2f}",
            {None: "", True: "yes", False: "[red]NO[/red]"}[r.bytes_match],
            r.note,
        )
    console = Console(width=None if sys.stdout.isatty() else 132)
    console.print(table)
    peak = "unknown" if result.peak_gbps is None else f"{result.peak_gbps:,.0f} GB/s"
    console.print(
        f"floor = bytes read + written at {peak} ({result.peak_source}); "
        "quantize moves in+1+1/32 B/elem, dequantize 1+1/32+out B/elem"
    )
    for note in result.notes:
        console.print(f"note: {note}")


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
