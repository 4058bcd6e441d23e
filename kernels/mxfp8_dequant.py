"""Triton MXFP8 dequantize: E4M3 bytes + E8M0 bytes -> bf16 / fp16 / fp32, built from bits."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from kvdoctor_kernels.mxfp8_numerics import bf16_bits_rne, decode_e4m3, scale_value


@triton.jit
def _mxfp8_dequantize_kernel(
    q_ptr, s_ptr, y_ptr, n_blocks, BLOCKS: tl.constexpr, BF16_BITS: tl.constexpr
):
    blk = tl.program_id(0).to(tl.int64) * BLOCKS + tl.arange(0, BLOCKS)
    offs = blk[:, None] * 32 + tl.arange(0, 32)[None, :]
    live = blk < n_blocks
    q = tl.load(q_ptr + offs, mask=live[:, None], other=0).to(tl.int32)
    byte = tl.load(s_ptr + blk, mask=live, other=127).to(tl.int32)
    y = decode_e4m3(q) * scale_value(byte)[:, None]
    if BF16_BITS:  # stored as int16 bits: the interpreter's fp32 -> bf16 cast truncates
        tl.store(y_ptr + offs, bf16_bits_rne(y).to(tl.int16), mask=live[:, None])
    else:
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=live[:, None])


def launch_dequantize(
    payload: torch.Tensor, scales: torch.Tensor, out: torch.Tensor,
    *, blocks_per_program: int = 128, num_warps: int = 4,
) -> None:
    """Decode contiguous uint8 ``payload`` / ``scales`` into contiguous ``out``."""
    n_blocks = payload.numel() // 32
    if n_blocks == 0:
        return
    grid = (triton.cdiv(n_blocks, blocks_per_program),)
    bf16 = out.dtype == torch.bfloat16
    _mxfp8_dequantize_kernel[grid](
        payload, scales, out.view(torch.int16) if bf16 else out, n_blocks,
        BLOCKS=blocks_per_program, BF16_BITS=bf16, num_warps=num_warps,
    )
