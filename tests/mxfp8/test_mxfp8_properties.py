"""Property tests: kernel == reference byte for byte, error bound, idempotence (mxfp8.md §3)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from mxfp8_impls import KERNEL_DEVICE, exact, torch_fast, triton_kernel

from kvdoctor import mxfp8
from kvdoctor.choices import ScaleMode

MODES = [m.value for m in ScaleMode]  # every --scale-mode

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
SPECIALS = torch.tensor(
    [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 448.0, 480.0, -464.0, 2.0**-149, 2.0**-133, 15.5, 232.0]
)


@st.composite
def tensors(draw: st.DrawFn, specials: bool = True) -> torch.Tensor:
    """Small (rows, k*32) tensors whose blocks span many binades, with optional special values."""
    seed = draw(st.integers(0, 2**31 - 1))
    rows = draw(st.integers(1, 3))
    blocks = draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(DTYPES))
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, blocks, 32, generator=gen)
    # Each block gets its own binade, from far below E4M3's range to near the dtype's top.
    top = {torch.float16: 14, torch.bfloat16: 120, torch.float32: 120}[dtype]
    shift = torch.randint(-140, top, (rows, blocks, 1), generator=gen).float()
    x = x * torch.exp2(shift)
    if specials and draw(st.booleans()):
        picks = torch.randint(0, len(SPECIALS), (rows, blocks, 32), generator=gen)
        where = torch.rand(rows, blocks, 32, generator=gen) < 0.1
        x = torch.where(where, SPECIALS[picks], x)
    return x.reshape(rows, blocks * 32).to(dtype)


def _same(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> None:
    assert torch.equal(a[1], b[1]), "scale bytes differ"
    assert torch.equal(a[0], b[0]), "payload bytes differ"


@settings(max_examples=150, deadline=None)
@given(x=tensors(), mode=st.sampled_from(MODES))
def test_kernel_matches_reference(x: torch.Tensor, mode: str) -> None:
    want = exact(x, mode)
    _same(torch_fast(x, mode), want)
    _same(triton_kernel(x, mode), want)


@settings(max_examples=25, deadline=None)
@given(x=tensors(), mode=st.sampled_from(MODES), out=st.sampled_from(DTYPES))
def test_dequant_kernel_matches_reference(x: torch.Tensor, mode: str, out: torch.dtype) -> None:
    t = mxfp8.quantize(x, scale_mode=mode, backend="torch")
    ref = mxfp8.dequantize(t, out, backend="torch")
    on_device = mxfp8.MXFP8Tensor(t.payload.to(KERNEL_DEVICE), t.scales.to(KERNEL_DEVICE))
    got = mxfp8.dequantize(on_device, out, backend="triton").cpu()
    assert torch.equal(got.view(torch.uint8), ref.view(torch.uint8))  # NaN bits included


def _finite_blocks(x: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(x.float().view(*x.shape[:-1], -1, 32)).all(-1)


@settings(max_examples=40, deadline=None)
@given(x=tensors(specials=False), mode=st.sampled_from(MODES))
def test_roundtrip_error_bound(x: torch.Tensor, mode: str) -> None:
    """|x - deq| <= 2^-4 |x| (RNE, 3 mantissa bits) + half an E4M3 subnormal step of the block
    scale; FLOOR may also saturate (448, 512) * scale, which costs up to 1/8 of |x|."""
    t = mxfp8.quantize(x, scale_mode=mode, backend="torch")
    y = mxfp8.dequantize(t, torch.float32, backend="torch")
    xf = x.float()
    scale = torch.exp2(t.scales.double() - 127).repeat_interleave(32, dim=-1)
    rel = 0.125 if mode == "floor" else 2.0**-4
    bound = rel * xf.double().abs() + 2.0**-10 * scale
    assert ((xf.double() - y.double()).abs() <= bound).all()


@settings(max_examples=40, deadline=None)
@given(x=tensors())
def test_floor_is_byte_idempotent(x: torch.Tensor) -> None:
    """FLOOR keeps the scaled amax in [256, 448] so re-quantising the fp32 decode gives the same
    bytes; RCEIL/SGLang do not promise this (a block at 224 drops one exponent)."""
    t = mxfp8.quantize(x, scale_mode="floor", backend="torch")
    again = mxfp8.quantize(mxfp8.dequantize(t, torch.float32, backend="torch"), scale_mode="floor", backend="torch")
    assert torch.equal(again.scales, t.scales)
    assert torch.equal(again.payload.view(torch.uint8), t.payload.view(torch.uint8))


@settings(max_examples=40, deadline=None)
@given(x=tensors(specials=False), mode=st.sampled_from(("rceil", "sglang")))
def test_ceil_modes_are_value_idempotent(x: torch.Tensor, mode: str) -> None:
    """For RCEIL-style scales, re-quantising decoded values may change bytes but not values."""
    once = mxfp8.dequantize(mxfp8.quantize(x, scale_mode=mode, backend="torch"), torch.float32, backend="torch")
    twice = mxfp8.dequantize(mxfp8.quantize(once, scale_mode=mode, backend="torch"), torch.float32, backend="torch")
    assert torch.equal(once, twice)


def test_rceil_bytes_are_not_idempotent() -> None:
    """Teeth for the test above: a block whose scaled amax rounds to 224 changes every byte."""
    x = torch.full((1, 32), 1.0)
    x[0, 0] = 450.0  # amax 450 -> byte 128; 450 / 2 = 225 -> 224 (0x76), 1.0 / 2 -> 0x30
    t = mxfp8.quantize(x, scale_mode="rceil", backend="torch")
    assert t.scales.tolist() == [[128]]
    again = mxfp8.quantize(mxfp8.dequantize(t, torch.float32), scale_mode="rceil", backend="torch")
    assert again.scales.tolist() == [[127]]  # 448 -> 2^0 exactly: one exponent lower
    assert not torch.equal(again.payload.view(torch.uint8), t.payload.view(torch.uint8))


def test_dequant_kernel_and_reference_write_the_same_nan_bits() -> None:
    """NaN payloads and NaN-scale blocks (an Inf in FLOOR/RCEIL) with negative neighbours."""
    x = -torch.ones(3, 64)
    x[0, 3], x[1, 40], x[2, 7] = float("nan"), float("inf"), -float("nan")
    # sglang: two NaN payloads (0x7F) only; rceil: NaN and Inf make three NaN-scale blocks.
    for mode, nans in (("sglang", 2), ("rceil", 3 * 32)):
        for dtype in DTYPES:
            t = mxfp8.quantize(x.to(dtype), scale_mode=mode, backend="torch")
            on_device = mxfp8.MXFP8Tensor(t.payload.to(KERNEL_DEVICE), t.scales.to(KERNEL_DEVICE))
            for out in DTYPES:
                ref = mxfp8.dequantize(t, out, backend="torch")
                got = mxfp8.dequantize(on_device, out, backend="triton").cpu()
                assert ref.isnan().sum() == nans
                assert torch.equal(got.view(torch.uint8), ref.view(torch.uint8)), (mode, dtype, out)
