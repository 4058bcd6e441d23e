"""Triton MXFP8 dequantize: E4M3 bytes + E8M0 bytes -> bf16 / fp16 / fp32, built from bits.

The output is stored as integer bits with one canonical NaN per dtype (0x7fc00000, 0x7e00, 0x7fc0):
GPUs and the interpreter disagree on the NaN a float multiply or narrowing cast produces.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kvdoctor.mxfp8.kernels.mxfp8_numerics import bf16_bits_rne, decode_e4m3, scale_value

FP32, FP16, BF16 = 0, 1, 2
_OUT_KIND = {
    torch.float32: (FP32, torch.int32),
    torch.float16: (FP16, torch.int16),
    torch.bfloat16: (BF16, torch.int16),
}


@triton.jit
def _mxfp8_dequantize_kernel(q_ptr, s_ptr, y_ptr, n_blocks, BLOCKS: tl.constexpr, OUT: tl.constexpr):
    blk = tl.program_id(0).to(tl.int64) * BLOCKS + tl.arange(0, BLOCKS)
    offs = blk[:, None] * 32 + tl.arange(0, 32)[None, :]
    live = blk < n_blocks
    q = tl.load(q_ptr + offs, mask=live[:, None], other=0).to(tl.int32)
    byte = tl.load(s_ptr + blk, mask=live, other=127).to(tl.int32)
    y = decode_e4m3(q) * scale_value(byte)[:, None]
    is_nan = y != y
    if OUT == BF16:  # the interpreter's fp32 -> bf16 cast truncates: round from bits
        bits = bf16_bits_rne(y).to(tl.int16)
    elif OUT == FP16:
        bits = tl.where(is_nan, 0x7E00, y.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32)).to(tl.int16)
    else:
        bits = tl.where(is_nan, 0x7FC00000, y.to(tl.int32, bitcast=True))
    tl.store(y_ptr + offs, bits, mask=live[:, None])


def launch_dequantize(
    payload: torch.Tensor,
    scales: torch.Tensor,
    out: torch.Tensor,
    *,
    blocks_per_program: int = 128,
    num_warps: int = 4,
) -> None:
    """Decode contiguous uint8 ``payload`` / ``scales`` into contiguous ``out``."""
    n_blocks = payload.numel() // 32
    if n_blocks == 0:
        return
    grid = (triton.cdiv(n_blocks, blocks_per_program),)
    kind, bits = _OUT_KIND[out.dtype]
    _mxfp8_dequantize_kernel[grid](
        payload,
        scales,
        out.view(bits),
        n_blocks,
        BLOCKS=blocks_per_program,
        OUT=kind,
        num_warps=num_warps,
    )
