"""SGLang's FA4 interleaved ("BlockScaledBasicChunk") scale layout for paged MXFP8 KV pools.

Each (page, KV head) owns PAGE * SF bytes shaped (32, PAGE / 32, SF): token t = loc % PAGE sits at
row t % 32, column group t // 32 (mxfp8.md §5).  A slot's scales are therefore NOT contiguous
rows of a (rows, H, SF) view; pools gather and scatter them through these offsets.
"""

from __future__ import annotations

import torch

from kvdoctor._exceptions import InputError
from kvdoctor.mxfp8.format import BLOCK


def check_paging(head_dim: int, page_size: int) -> None:
    """The layout needs whole 32-element blocks and whole 32-token row groups per page."""
    if head_dim % BLOCK:
        raise InputError(f"MXFP8 head_dim must be a multiple of {BLOCK}, got {head_dim}")
    if page_size <= 0 or page_size % BLOCK:
        raise InputError(f"MXFP8 page_size must be a positive multiple of {BLOCK}, got {page_size}")


def scale_offsets(loc: torch.Tensor, heads: int, head_dim: int, page_size: int) -> torch.Tensor:
    """Byte offsets (n, heads, head_dim // 32), int64, of every scale of the slots in ``loc``."""
    check_paging(head_dim, page_size)
    sf = head_dim // BLOCK
    loc = loc.to(torch.int64).reshape(-1, 1, 1)
    h = torch.arange(heads, dtype=torch.int64, device=loc.device).view(1, -1, 1)
    j = torch.arange(sf, dtype=torch.int64, device=loc.device).view(1, 1, -1)
    groups = page_size // BLOCK
    in_page = loc % page_size
    return (
        ((loc // page_size) * heads + h) * (BLOCK * groups * sf)
        + (in_page % BLOCK) * (groups * sf)
        + (in_page // BLOCK) * sf
        + j
    )
