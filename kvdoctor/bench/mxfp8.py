"""`kvdoctor bench mxfp8`: codec throughput per backend against the memory-traffic floor.

Every row is measured in the same run on the same tensor, next to a plain
``tensor.to(torch.float8_e4m3fn)`` cast (and its fp8 -> dtype inverse), so ratios are honest.
Traffic accounting follows mxfp8.md §8: quantize moves in_bytes + 1 + 1/32 bytes per element,
dequantize 1 + 1/32 + out_bytes; the floor is that traffic at the device's peak bandwidth.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from kvdoctor import mxfp8
from kvdoctor._exceptions import InputError
from kvdoctor.bench.timing import Timing, time_call

# Spec HBM bandwidth, GB/s (mxfp8.md §8); matched against torch.cuda.get_device_name().
SPEC_PEAK_GBPS = {
    "H200": 4800.0,
    "H100 SXM": 3350.0,
    "H100 80GB HBM3": 3350.0,
    "H100 PCIe": 2000.0,
    "B200": 7672.0,
    "A100": 2039.0,
}
# (blocks per program, warps) tried by --sweep on CUDA; the API default is (128, 4).
TILE_SWEEP = ((32, 2), (64, 4), (128, 4), (128, 8), (256, 8), (512, 8))
CPU_TRITON_BYTES = 64 * 1024  # the interpreter is ~10^4x slower: a token size, clearly labelled


@dataclass(frozen=True)
class BenchRow:
    """One measured operation."""

    op: str  # "quantize" | "dequantize" | "copy"
    backend: str  # "triton" | "torch" | "cast" (plain dtype cast) | "memcpy"
    elements: int
    bytes_moved: int
    median_s: float
    min_s: float  # the fastest sample: steadier than the median on a shared CPU
    gbps: float
    floor_fraction: float | None  # achieved / peak bandwidth; None when no peak is known
    vs_cast: float | None  # time / plain-cast time of the same op and size
    bytes_match: bool | None  # triton payload/scales == torch reference (quantize rows)
    note: str = ""


@dataclass(frozen=True)
class BenchResult:
    device: str
    dtype: str
    scale_mode: str
    input_bytes: int
    peak_gbps: float | None
    peak_source: str
    rows: list[BenchRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


_SIZE = re.compile(r"^\s*([0-9.eE+]+)\s*([kmg]i?b|b)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_size(text: str) -> int:
    """'1GiB', '256MiB', '64KiB', '1e6' (bytes) -> bytes."""
    match = _SIZE.match(text)
    try:
        value = int(float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()]) if match else 0
    except ValueError:
        value = 0
    if value <= 0:
        raise InputError(f"cannot read size {text!r}; use a positive size such as 64MiB or 1GiB")
    return value


def _peak(device: torch.device, override: float | None, copy_gbps: float) -> tuple[float, str]:
    if override:
        return override, "--peak-gbps"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, gbps in SPEC_PEAK_GBPS.items():
            if key in name:
                return gbps, f"spec ({name})"
    return copy_gbps, "measured copy"


def _source(elements: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(elements // 32, 32, generator=gen, device=device, dtype=torch.float32)
    x *= torch.exp2(torch.randint(-8, 8, (elements // 32, 1), generator=gen, device=device).float())
    return x.to(dtype).view(-1, 1024) if elements % 1024 == 0 else x.to(dtype)


def run_mxfp8_bench(
    *,
    size_bytes: int,
    device: str,
    dtype: torch.dtype = torch.bfloat16,
    scale_mode: str = "sglang",
    backends: tuple[str, ...] = ("torch", "triton"),
    repeats: int = 10,
    peak_gbps: float | None = None,
    sweep: bool = False,
) -> BenchResult:
    """Measure quantize and dequantize for each backend, the plain casts, and a device copy."""
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda requested but CUDA is not available")
    in_bytes = torch.empty((), dtype=dtype).element_size()
    elements = max(1024, size_bytes // in_bytes // 1024 * 1024)
    x = _source(elements, dtype, dev)

    def timed(fn: Callable[[], object], n: int = repeats) -> Timing:
        return time_call(fn, device=dev, repeats=n, warmup=2)

    copy_dst = torch.empty_like(x)
    copy_s = timed(lambda: copy_dst.copy_(x))
    copy_gbps = 2 * elements * in_bytes / copy_s.median_s / 1e9
    peak, peak_source = _peak(dev, peak_gbps, copy_gbps)

    def row(
        op: str,
        backend: str,
        n: int,
        moved: int,
        t: Timing,
        cast_s: float | None,
        match: bool | None = None,
        note: str = "",
    ) -> BenchRow:
        gbps = moved / t.median_s / 1e9
        return BenchRow(
            op,
            backend,
            n,
            moved,
            t.median_s,
            t.min_s,
            gbps,
            gbps / peak if peak else None,
            t.median_s / cast_s if cast_s else None,
            match,
            note,
        )

    rows = [row("copy", "memcpy", elements, 2 * elements * in_bytes, copy_s, None)]
    cast_q = timed(lambda: x.to(torch.float8_e4m3fn))
    rows.append(
        row("quantize", "cast", elements, elements * (in_bytes + 1), cast_q, cast_q.median_s, note="plain fp8 cast")
    )
    fp8 = x.to(torch.float8_e4m3fn)
    cast_d = timed(lambda: fp8.to(dtype))
    rows.append(
        row("dequantize", "cast", elements, elements * (1 + in_bytes), cast_d, cast_d.median_s, note="plain fp8 cast")
    )

    reference = mxfp8.quantize(x, scale_mode=scale_mode, backend="torch")
    notes: list[str] = []
    for backend in backends:
        xb, note, n = x, "", elements
        if backend == "triton" and dev.type == "cpu":
            if os.environ.get("TRITON_INTERPRET") != "1":
                notes.append("triton skipped on CPU: the interpreter needs TRITON_INTERPRET=1")
                continue
            n = max(1024, CPU_TRITON_BYTES // in_bytes // 1024 * 1024)
            xb, note = x.view(-1)[:n].view(-1, 1024), "interpreter"
            notes.append(
                f"triton on CPU runs under the Triton interpreter at {n} elements only; "
                "its vs-cast ratio scales the cast time linearly"
            )
        nq = n * (in_bytes + 1) + n // 32
        t = mxfp8.quantize(xb, scale_mode=scale_mode, backend=backend)
        ref_bytes = reference if xb is x else mxfp8.quantize(xb, scale_mode=scale_mode, backend="torch")
        match = torch.equal(t.scales, ref_bytes.scales) and torch.equal(
            t.payload.view(torch.uint8), ref_bytes.payload.view(torch.uint8)
        )
        reps = repeats if xb is x else max(2, repeats // 4)
        timing = timed(lambda xb=xb, b=backend: mxfp8.quantize(xb, scale_mode=scale_mode, backend=b), reps)
        rows.append(row("quantize", backend, n, nq, timing, cast_q.median_s * n / elements, match, note))
        timing = timed(lambda t=t, b=backend: mxfp8.dequantize(t, dtype, backend=b), reps)
        rows.append(row("dequantize", backend, n, nq, timing, cast_d.median_s * n / elements, None, note))
    if sweep and dev.type == "cuda":
        rows.extend(_sweep_tiles(x, reference, scale_mode, timed, row))
    elif sweep:
        notes.append("--sweep runs only on CUDA")
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return BenchResult(
        device=name,
        dtype=str(dtype).removeprefix("torch."),
        scale_mode=scale_mode,
        input_bytes=elements * in_bytes,
        peak_gbps=peak,
        peak_source=peak_source,
        rows=rows,
        notes=notes,
    )


def _sweep_tiles(
    x: torch.Tensor,
    reference: object,
    scale_mode: str,
    timed: Callable[..., Timing],
    row: Callable[..., BenchRow],
) -> list[BenchRow]:
    """Quantize kernel at each (blocks per program, warps) tile, straight through the launcher."""
    from kvdoctor.mxfp8.kernels.mxfp8_quant import launch_quantize

    n = x.numel()
    payload = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    scales = torch.empty((n // 32,), dtype=torch.uint8, device=x.device)
    moved = n * (x.element_size() + 1) + n // 32
    out = []
    for blocks, warps in TILE_SWEEP:

        def run(blocks: int = blocks, warps: int = warps) -> None:
            launch_quantize(x, payload, scales, scale_mode, blocks_per_program=blocks, num_warps=warps)

        run()
        match = torch.equal(scales, reference.scales.view(-1)) and torch.equal(  # type: ignore[attr-defined]
            payload, reference.payload.view(torch.uint8)
        )  # type: ignore[attr-defined]
        out.append(row("quantize", f"triton b{blocks} w{warps}", n, moved, timed(run), None, match, "tile sweep"))
    return out
