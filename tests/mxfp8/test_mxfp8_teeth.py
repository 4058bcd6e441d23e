"""Each protection in the codec, removed, gives wrong bytes: proof that the guards are needed."""

from __future__ import annotations

import os

import pytest
import torch
import triton
import triton.language as tl
from mxfp8_impls import IMPLS, KERNEL_DEVICE

from kvdoctor.mxfp8 import reference

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _native_cast_kernel(v_ptr, q_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    v = tl.load(v_ptr + offs)
    tl.store(q_ptr + offs, v.to(tl.float8e4nv).to(tl.uint8, bitcast=True))


# Rounding traps (mxfp8.md §6.1): a tie to even, a tie whose rounding carries into the exponent,
# the interpreter's own example 126.24, a value between 448 and the next (NaN) code, a subnormal
# tie, and Inf (satfinite).
TRAPS = [2.0**-10 * 3, 15.5, 126.24, 232.0, 449.0, 2.0**-10, 1e9, -0.0]


def _native_cast(values: list[float]) -> torch.Tensor:
    v = torch.tensor(values + [0.0] * (8 - len(values)), device=KERNEL_DEVICE)
    q = torch.empty(8, dtype=torch.uint8, device=KERNEL_DEVICE)
    _native_cast_kernel[(1,)](v, q, N=8)
    return q.cpu()


def test_native_fp8_cast_disagrees_under_the_interpreter_or_agrees_on_gpu() -> None:
    """Under TRITON_INTERPRET the built-in fp32 -> fp8 cast rounds half-up, loses carries and does
    not saturate, so a kernel using it would fail the bit-exactness suite; on a GPU the hardware
    cast (RNE, satfinite) must agree with the integer encoder, which licenses it there."""
    want = reference.encode_e4m3(torch.tensor(TRAPS))
    native = _native_cast(TRAPS)
    if INTERPRETED:
        assert not torch.equal(native, want), "interpreter cast became exact: guard may be dropped"
    else:
        assert torch.equal(native, want)


def test_float_log2_scale_formula_picks_the_wrong_exponent() -> None:
    """SGLang's float formula ceil(log2(amax / 448)) loses a one-ulp excess over a power of two:
    for amax = 448 * 2^k * (1 + 2^-23), log2 rounds to exactly k, ceil keeps k, and the element
    then overflows 448.  The integer rule (used for every mode) rounds it up to k + 1."""
    amax = torch.tensor([448.0 * 2**4]) * (1 + 2.0**-23)
    floaty = torch.ceil(torch.log2(amax / 448.0)) + 127
    exact = reference.scale_bytes(amax.view(torch.int32), "rceil")
    assert int(exact) == 132
    assert int(floaty) == 131


def test_unguarded_max_reduction_gives_backend_dependent_scales() -> None:
    """torch's (and the interpreter's) max propagates NaN while GPU ``tl.max`` drops it; without
    canonicalising NaN before the reduction the SGLang scale of a NaN block is NaN -> garbage."""
    x = torch.ones(1, 32)
    x[0, 7] = float("nan")
    naive_amax = x.abs().amax(dim=1)  # what an unguarded reduction sees here
    assert torch.isnan(naive_amax).all()
    payload, scales = IMPLS["triton"](x, "sglang")
    assert scales.tolist() == [[119]]  # NaN ignored, as the GPU kernel does
    assert payload[0, 7] == 0x7F


def test_bf16_subnormals_survive_the_kernel() -> None:
    """A bf16 2^-133 block must encode as 0x08 with scale 0 (mxfp8.md §7.1); the kernel widens
    bf16 by a bit shift because the interpreter's cast flushes it (next test)."""
    x = torch.full((1, 32), 2.0**-133, dtype=torch.bfloat16)
    payload, scales = IMPLS["triton"](x, "rceil")
    assert scales.tolist() == [[0]] and payload.unique().tolist() == [0x08]


@pytest.mark.skipif(not INTERPRETED, reason="the flushing bf16 load exists only in the interpreter")
def test_interpreter_bf16_widening_flushes_subnormals() -> None:
    @triton.jit
    def widen(x_ptr, y_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(tl.float32))

    x = torch.full((8,), 2.0**-133, dtype=torch.bfloat16)
    y = torch.empty(8)
    widen[(1,)](x, y, N=8)
    assert (y == 0).all()


@pytest.mark.skipif(not INTERPRETED, reason="the truncating bf16 store exists only in the interpreter")
def test_interpreter_bf16_store_truncates() -> None:
    """Why the dequant kernel rounds fp32 -> bf16 itself: the interpreter's cast truncates."""
    v = torch.tensor([1.0 + 2.0**-8 + 2.0**-9] + [0.0] * 7)  # must round up to 1 + 2^-7

    @triton.jit
    def cast_bf16(v_ptr, y_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(y_ptr + offs, tl.load(v_ptr + offs).to(tl.bfloat16))

    y = torch.empty(8, dtype=torch.bfloat16)
    cast_bf16[(1,)](v, y, N=8)
    assert y[0] != v[0].to(torch.bfloat16)
