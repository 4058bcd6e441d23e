"""Public MXFP8 codec API: validate, pick a backend, call the torch reference or the Triton kernel."""

from __future__ import annotations

import os

import torch

from kvdoctor._exceptions import InputError
from kvdoctor.choices import ScaleMode
from kvdoctor.mxfp8 import reference
from kvdoctor.mxfp8.format import BACKENDS, BLOCK, INPUT_DTYPES, MXFP8Tensor
from kvdoctor.mxfp8.layout import check_paging


def resolve_backend(backend: str, device: torch.device) -> str:
    """``auto`` is Triton on CUDA and torch elsewhere; Triton on CPU needs the interpreter."""
    if backend not in BACKENDS:
        raise InputError(f"unknown MXFP8 backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "triton" if device.type == "cuda" else "torch"
    if backend == "triton" and device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise InputError("backend='triton' on a CPU tensor needs TRITON_INTERPRET=1 set before triton is imported")
    return backend


def _check_mode(scale_mode: str) -> None:
    modes = [m.value for m in ScaleMode]  # the one list of scale modes (``--scale-mode`` offers the same)
    if scale_mode not in modes:
        raise InputError(f"unknown MXFP8 scale_mode {scale_mode!r}; choose one of {', '.join(modes)}")


def _check_source(x: torch.Tensor) -> None:
    if x.dtype not in INPUT_DTYPES:
        raise InputError(f"MXFP8 quantize needs bf16, fp16 or fp32 input, got {x.dtype}")
    if x.dim() == 0 or x.shape[-1] % BLOCK:
        last = x.shape[-1] if x.dim() else "a scalar"
        raise InputError(f"MXFP8 quantization requires last dim divisible by {BLOCK}, got {last}")


def quantize(x: torch.Tensor, *, scale_mode: str = "sglang", backend: str = "auto") -> MXFP8Tensor:
    """Quantize the last dim of ``x`` into E4M3 payload + one E8M0 scale byte per 32 elements."""
    _check_mode(scale_mode)
    _check_source(x)
    if resolve_backend(backend, x.device) == "torch":
        payload, scales = reference.quantize(x, scale_mode)
    else:
        from kvdoctor.mxfp8.kernels.mxfp8_quant import launch_quantize

        x = x.contiguous()
        payload = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
        scales = torch.empty((*x.shape[:-1], x.shape[-1] // BLOCK), dtype=torch.uint8, device=x.device)
        launch_quantize(x, payload, scales, scale_mode)
    return MXFP8Tensor(payload=payload.view(torch.float8_e4m3fn), scales=scales)


def dequantize(t: MXFP8Tensor, dtype: torch.dtype = torch.bfloat16, *, backend: str = "auto") -> torch.Tensor:
    """Decode to ``dtype``: E4M3(q) * 2^(byte - 127); scale byte 0xFF makes its block NaN."""
    if dtype not in INPUT_DTYPES:
        raise InputError(f"MXFP8 dequantize returns bf16, fp16 or fp32, not {dtype}")
    payload = t.payload.view(torch.uint8)
    expected = (*payload.shape[:-1], payload.shape[-1] // BLOCK)
    if payload.dim() == 0 or payload.shape[-1] % BLOCK or tuple(t.scales.shape) != expected:
        raise InputError(
            f"MXFP8 scales shape {tuple(t.scales.shape)} does not match payload "
            f"{tuple(payload.shape)} (expected {expected})"
        )
    scales = t.scales.view(torch.uint8)
    if resolve_backend(backend, payload.device) == "torch":
        return reference.dequantize(payload, scales, dtype)
    from kvdoctor.mxfp8.kernels.mxfp8_dequant import launch_dequantize

    out = torch.empty(payload.shape, dtype=dtype, device=payload.device)
    launch_dequantize(payload.contiguous(), scales.contiguous(), out)
    return out


def _check_pool(
    x: torch.Tensor, loc: torch.Tensor, payload: torch.Tensor, scales: torch.Tensor, page_size: int
) -> None:
    if x.dim() != 3:
        raise InputError(f"quantize_scatter needs x shaped (n, heads, head_dim), got {tuple(x.shape)}")
    n, heads, head_dim = x.shape
    check_paging(head_dim, page_size)
    _check_source(x)
    if loc.shape != (n,) or loc.dtype not in (torch.int64, torch.int32):
        raise InputError(f"loc must be an int64 tensor of shape ({n},), got {loc.dtype} {tuple(loc.shape)}")
    if payload.dtype != torch.uint8 or payload.dim() != 3 or payload.shape[1:] != (heads, head_dim):
        raise InputError(
            f"payload must be uint8 (rows, {heads}, {head_dim}), got {payload.dtype} {tuple(payload.shape)}"
        )
    rows = payload.shape[0]
    if rows % page_size:
        raise InputError(f"pool rows ({rows}) must be a multiple of page_size ({page_size})")
    if scales.dtype != torch.uint8 or scales.numel() != rows * heads * head_dim // BLOCK:
        raise InputError(
            f"scales must be flat uint8 of {rows * heads * head_dim // BLOCK} bytes, "
            f"got {scales.dtype} with {scales.numel()}"
        )
    if not (payload.is_contiguous() and scales.is_contiguous()):
        raise InputError("payload and scales pool buffers must be contiguous")
    if n and (int(loc.min()) < 0 or int(loc.max()) >= rows):
        raise InputError(f"loc holds slots outside the pool [0, {rows})")


def quantize_scatter(
    x: torch.Tensor,
    loc: torch.Tensor,
    payload: torch.Tensor,
    scales: torch.Tensor,
    *,
    page_size: int,
    scale_mode: str = "sglang",
    backend: str = "auto",
    skip_padding_slot: bool = True,
) -> None:
    """Quantize (n, H, D) rows and write them to pool slots ``loc``, like an MXFP8 KV write.

    Payload row ``loc[i]`` of ``payload`` (rows, H, D) gets the E4M3 bytes; ``scales`` (flat,
    rows * H * D / 32 bytes) gets the E8M0 bytes in SGLang's FA4 interleaved layout (see
    ``scale_offsets``).  Slot 0 is SGLang's padding sink and, as in SGLang, is not written unless
    ``skip_padding_slot=False``.
    """
    _check_mode(scale_mode)
    _check_pool(x, loc, payload, scales, page_size)
    loc = loc.to(torch.int64)
    if resolve_backend(backend, x.device) == "torch":
        reference.quantize_scatter(
            x,
            loc,
            payload,
            scales,
            page_size=page_size,
            scale_mode=scale_mode,
            skip_padding_slot=skip_padding_slot,
        )
        return
    from kvdoctor.mxfp8.kernels.mxfp8_scatter import launch_quantize_scatter

    launch_quantize_scatter(
        x.contiguous(),
        loc.contiguous(),
        payload,
        scales.view(-1),
        page_size=page_size,
        scale_mode=scale_mode,
        skip_padding_slot=skip_padding_slot,
    )
