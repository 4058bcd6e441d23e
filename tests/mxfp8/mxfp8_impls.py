"""The three encoders every MXFP8 test compares: integer rules, torch fast path, Triton kernel."""

from __future__ import annotations

from collections.abc import Callable

import torch

from kvdoctor import mxfp8
from kvdoctor.mxfp8 import reference

KERNEL_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

Quantizer = Callable[[torch.Tensor, str], tuple[torch.Tensor, torch.Tensor]]


def exact(x: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    return reference.quantize_exact(x, mode)


def torch_fast(x: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    t = mxfp8.quantize(x, scale_mode=mode, backend="torch")
    return t.payload.view(torch.uint8), t.scales


def triton_kernel(x: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    t = mxfp8.quantize(x.to(KERNEL_DEVICE), scale_mode=mode, backend="triton")
    return t.payload.view(torch.uint8).cpu(), t.scales.cpu()


IMPLS: dict[str, Quantizer] = {"exact": exact, "torch": torch_fast, "triton": triton_kernel}


def f32_from_bits(bits: list[int]) -> torch.Tensor:
    return torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
