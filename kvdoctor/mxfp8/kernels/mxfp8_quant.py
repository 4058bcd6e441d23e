"""Triton MXFP8 quantize: contiguous x (any float dtype) -> E4M3 bytes + one E8M0 byte per 32.

A contiguous tensor whose last dim is a multiple of 32 is, flattened, just a run of 32-element
blocks, so each program takes ``BLOCKS`` consecutive blocks as a (BLOCKS, 32) tile: one coalesced
load, a 32-wide integer max, the integer scale rule, the integer encoder, two coalesced stores.
Offsets are int64 (inputs past 2^31 elements), and the block count decides every mask.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kvdoctor.mxfp8.kernels.mxfp8_numerics import (
    MODE_IDS,
    block_amax_bits,
    encode_e4m3,
    inverse_scale,
    scale_byte,
)


@triton.jit
def widen(x, BF16_BITS: tl.constexpr):
    """Source values -> fp32.  bf16 arrives as int16 bits and is widened by a shift: the
    interpreter's bf16 -> fp32 cast flushes subnormals, the shift is exact everywhere."""
    if BF16_BITS:
        return ((x.to(tl.int32) & 0xFFFF) << 16).to(tl.float32, bitcast=True)
    return x.to(tl.float32)


@triton.jit
def quantize_blocks(xb, MODE: tl.constexpr):
    """(B, 32) fp32 -> ((B, 32) E4M3 bytes, (B,) scale bytes), both int32."""
    abs_bits = xb.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    byte = scale_byte(block_amax_bits(abs_bits, MODE), MODE)
    q = encode_e4m3(xb * inverse_scale(byte)[:, None])
    return q, byte


@triton.jit
def _mxfp8_quantize_kernel(
    x_ptr,
    q_ptr,
    s_ptr,
    n_blocks,
    MODE: tl.constexpr,
    BLOCKS: tl.constexpr,
    BF16_BITS: tl.constexpr,
):
    blk = tl.program_id(0).to(tl.int64) * BLOCKS + tl.arange(0, BLOCKS)
    offs = blk[:, None] * 32 + tl.arange(0, 32)[None, :]  # 2-D from the start: no reshape
    live = blk < n_blocks
    x = widen(tl.load(x_ptr + offs, mask=live[:, None], other=0), BF16_BITS)
    q, byte = quantize_blocks(x, MODE)
    tl.store(q_ptr + offs, q.to(tl.uint8), mask=live[:, None])
    tl.store(s_ptr + blk, byte.to(tl.uint8), mask=live)


def launch_quantize(
    x: torch.Tensor,
    payload: torch.Tensor,
    scales: torch.Tensor,
    scale_mode: str,
    *,
    blocks_per_program: int = 128,
    num_warps: int = 4,
) -> None:
    """Quantize contiguous ``x`` into contiguous uint8 ``payload`` (same numel) and ``scales``."""
    n_blocks = x.numel() // 32
    if n_blocks == 0:
        return
    grid = (triton.cdiv(n_blocks, blocks_per_program),)
    bf16 = x.dtype == torch.bfloat16
    _mxfp8_quantize_kernel[grid](
        x.view(torch.int16) if bf16 else x,
        payload,
        scales,
        n_blocks,
        MODE=MODE_IDS[scale_mode],
        BLOCKS=blocks_per_program,
        BF16_BITS=bf16,
        num_warps=num_warps,
    )
