"""MXFP8 format constants and the tensor pair the codec returns (OCP MX v1.0, mxfp8.md §1)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 32
BACKENDS: tuple[str, ...] = ("triton", "torch", "auto")
INPUT_DTYPES: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16, torch.float32)

E4M3_NAN = 0x7F  # canonical NaN payload byte: every backend writes this, whatever the sign
E8M0_NAN = 0xFF


@dataclass(frozen=True)
class MXFP8Tensor:
    """E4M3 payload (same shape as the source) and one biased E8M0 byte per 32 elements."""

    payload: torch.Tensor  # torch.float8_e4m3fn, shape == source shape
    scales: torch.Tensor  # torch.uint8, shape == source.shape[:-1] + (source.shape[-1] // 32,)

    @property
    def shape(self) -> torch.Size:
        return self.payload.shape

    @property
    def device(self) -> torch.device:
        return self.payload.device
