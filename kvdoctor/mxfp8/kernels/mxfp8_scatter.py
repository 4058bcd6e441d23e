"""Triton fused MXFP8 quantize-and-scatter: what an SGLang MXFP8 KV write does in one launch.

One program per (token, KV head): quantize the head's D values, store the payload at pool row
``loc``, and store the SF = D / 32 scale bytes at their FA4 interleaved offsets (mxfp8.md §5).
Slot 0 is SGLang's padding sink and is skipped when ``SKIP_SLOT0`` is set, as the server does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kvdoctor.mxfp8.kernels.mxfp8_numerics import MODE_IDS
from kvdoctor.mxfp8.kernels.mxfp8_quant import quantize_blocks, widen


@triton.jit
def _mxfp8_quantize_scatter_kernel(
    x_ptr,
    loc_ptr,
    q_ptr,
    s_ptr,
    H: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    SF_P2: tl.constexpr,
    MODE: tl.constexpr,
    SKIP_SLOT0: tl.constexpr,
    BF16_BITS: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    SF: tl.constexpr = D // 32
    slot = tl.load(loc_ptr + t).to(tl.int64)
    if SKIP_SLOT0:  # noqa: SIM102 (constexpr test first: `and` cannot mix it with a tensor)
        if slot == 0:
            return
    blk = tl.arange(0, SF_P2)
    elem = blk[:, None] * 32 + tl.arange(0, 32)[None, :]
    live = (blk < SF)[:, None]
    x = widen(tl.load(x_ptr + (t * H + h) * D + elem, mask=live, other=0), BF16_BITS)
    q, byte = quantize_blocks(x, MODE)
    tl.store(q_ptr + (slot * H + h) * D + elem, q.to(tl.uint8), mask=live)
    po = slot % PAGE
    base = ((slot // PAGE) * H + h) * (PAGE * SF) + (po % 32) * ((PAGE // 32) * SF) + (po // 32) * SF
    tl.store(s_ptr + base + blk, byte.to(tl.uint8), mask=blk < SF)


def launch_quantize_scatter(
    x: torch.Tensor,
    loc: torch.Tensor,
    payload: torch.Tensor,
    scales: torch.Tensor,
    *,
    page_size: int,
    scale_mode: str,
    skip_padding_slot: bool,
) -> None:
    """x (n, H, D) contiguous, loc (n,) int64, payload (rows, H, D) uint8, scales flat uint8."""
    n, heads, head_dim = x.shape
    if n == 0:
        return
    sf_p2 = triton.next_power_of_2(head_dim // 32)
    bf16 = x.dtype == torch.bfloat16
    _mxfp8_quantize_scatter_kernel[(n, heads)](
        x.view(torch.int16) if bf16 else x,
        loc,
        payload,
        scales,
        H=heads,
        D=head_dim,
        PAGE=page_size,
        SF_P2=sf_p2,
        MODE=MODE_IDS[scale_mode],
        SKIP_SLOT0=skip_padding_slot,
        BF16_BITS=bf16,
    )
