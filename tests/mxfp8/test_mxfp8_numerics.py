"""The integer rules themselves: constants, the RCEIL byte table, scale bytes, the E4M3 encoder."""

from __future__ import annotations

import pytest
import torch
from mxfp8_impls import IMPLS

from kvdoctor.mxfp8 import reference
from kvdoctor.mxfp8.kernels import mxfp8_numerics


def _bits(value: float) -> int:
    return int(torch.tensor(value, dtype=torch.float32).view(torch.int32))


def test_bit_constants_match_torch() -> None:
    assert reference.INV_448_BITS == _bits(1 / 448) == mxfp8_numerics.INV_448_BITS.value
    assert _bits(1e-30) == reference.SGLANG_AMAX_FLOOR_BITS
    assert mxfp8_numerics.SGLANG_AMAX_FLOOR_BITS.value == reference.SGLANG_AMAX_FLOOR_BITS
    assert reference.E4M3_MAX_BITS == _bits(448.0) == mxfp8_numerics.E4M3_MAX_BITS.value


# mxfp8.md §7.2: input = fp32 bits of amax / 448, output = RCEIL byte.
RCEIL_TABLE = [
    (0x00000000, 0),
    (0x00000001, 0),
    (0x00400000, 0),
    (0x00400001, 1),
    (0x007FFFFF, 1),
    (0x00800000, 1),
    (0x1F800000, 63),
    (0x1F800001, 64),
    (0x3F7FFFFF, 127),
    (0x3F800000, 127),
    (0x3F800001, 128),
    (0x5F800000, 191),
    (0x5F800001, 192),
    (0x7F000000, 254),
    (0x7F000001, 255),
    (0x7F7FFFFF, 255),
    (0x7F800000, 255),
]


@pytest.mark.parametrize(("d_bits", "byte"), RCEIL_TABLE)
def test_rceil_byte_table(d_bits: int, byte: int) -> None:
    assert int(reference.rceil_byte(torch.tensor([d_bits], dtype=torch.int32))) == byte


def test_rceil_by_reciprocal_equals_correctly_rounded_division() -> None:
    """fl(amax * fl(1/448)) and the correctly rounded amax / 448 give the same byte (§2.1)."""
    gen = torch.Generator().manual_seed(0)
    amax_bits = torch.randint(1, 0x7F800000, (200_000,), generator=gen, dtype=torch.int32)
    amax = amax_bits.view(torch.float32)
    exact = (amax.double() / 448).float().view(torch.int32)  # one rounding of the true quotient
    assert torch.equal(reference.scale_bytes(amax_bits, "rceil"), reference.rceil_byte(exact))


def test_every_scale_byte_builds_its_power_of_two() -> None:
    byte = torch.arange(256, dtype=torch.int32)
    inv = reference.inverse_scale(byte).double()
    val = reference.scale_value(byte).double()
    k = torch.arange(256, dtype=torch.float64) - 127
    assert torch.equal(inv[:255], torch.exp2(-k[:255]))  # includes 254 -> 2^-127 (subnormal)
    assert torch.equal(val[:255], torch.exp2(k[:255]))  # includes 0 -> 2^-127
    assert torch.isnan(inv[255]) and torch.isnan(val[255])


def _structured_fp32() -> torch.Tensor:
    """Every exponent and sign, the top 4 mantissa bits, and the rounding-critical low bits
    (0, 1, just below / at / above the normal-range tie, all ones) plus every subnormal-range tie."""
    exp = torch.arange(256, dtype=torch.int64).view(-1, 1, 1)
    top = torch.arange(16, dtype=torch.int64).view(1, -1, 1) << 19
    low = torch.tensor(
        [0, 1, 0x3FFFF, 0x40000, 0x40001, 0x7FFFF, 0x80000, 0x80001, 0xFFFFF]
        + [1 << s for s in range(20)]
        + [(1 << s) - 1 for s in range(1, 21)],
        dtype=torch.int64,
    ).view(1, 1, -1)
    bits = ((exp << 23) | top | (low & 0x7FFFF) | (low & 0x80000)).flatten()
    bits = torch.cat([bits, bits | (1 << 31)])
    return bits.to(torch.int32).view(torch.float32)


def test_integer_encoder_equals_torch_satfinite_cast() -> None:
    """Two independent E4M3 encoders agree on every rounding-relevant fp32 pattern."""
    v = _structured_fp32()
    mine = reference.encode_e4m3(v)
    cast = v.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    cast = torch.where((cast & 0x7F) == 0x7F, 0x7F, cast)  # canonical NaN
    assert torch.equal(mine, cast)


def test_all_bf16_values_at_every_scale_match_across_implementations() -> None:
    """All 65536 bf16 patterns, in order (narrow blocks) and shuffled (wide blocks), through all
    three encoders (the kernel via the interpreter on CPU)."""
    ordered = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16)
    shuffled = ordered[torch.randperm(1 << 16, generator=torch.Generator().manual_seed(0))]
    x = torch.cat([ordered, shuffled]).view(torch.bfloat16).view(-1, 32)
    for mode in ("sglang", "rceil", "floor"):
        want = IMPLS["exact"](x, mode)
        for name in ("torch", "triton"):
            got = IMPLS[name](x, mode)
            assert torch.equal(got[1], want[1]), (name, mode)
            assert torch.equal(got[0], want[0]), (name, mode)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_fast_path_is_chunk_size_independent(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    """Many small chunks with a ragged tail and NaN / Inf spread across them: same bytes."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(77, 96, generator=gen) * torch.exp2(torch.randint(-20, 20, (77, 1), generator=gen).float())
    x[3, 5], x[40, 70], x[76, 0] = float("nan"), float("inf"), -float("nan")
    x = x.to(dtype)
    monkeypatch.setattr(reference, "CPU_CHUNK_ELEMENTS", 7 * 32)
    for mode in ("sglang", "rceil", "floor"):
        got, want = reference.quantize(x, mode), reference.quantize_exact(x, mode)
        assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0])
        deq = reference.dequantize(*got, torch.float32)
        assert torch.equal(
            deq.isnan(), (reference.decode_e4m3(got[0]).isnan() | (got[1] == 255).repeat_interleave(32, -1))
        )


def test_clamping_path_for_non_saturating_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch < 2.13 casts without satfinite; the reference then clamps first: same bytes."""
    x = torch.tensor([[480.0, -1e30, float("inf"), 449.0] + [1.0] * 28])
    want = reference.quantize(x, "sglang")
    monkeypatch.setattr(reference, "_cast_saturates", lambda device_type: False)
    got = reference.quantize(x, "sglang")
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    # SGLang mode, Inf present: scale 254, Inf saturates to 448, the rest underflow (sign kept).
    assert got[1].tolist() == [[254]] and got[0][0, :4].tolist() == [0x00, 0x80, 0x7E, 0x00]


@pytest.mark.parametrize(
    ("dtype", "bits", "nan_bits"),
    [
        (torch.float32, torch.int32, 0x7FC00000),
        (torch.float16, torch.int16, 0x7E00),
        (torch.bfloat16, torch.int16, 0x7FC0),
    ],
)
def test_dequantize_writes_one_canonical_nan(dtype: torch.dtype, bits: torch.dtype, nan_bits: int) -> None:
    """Payload NaN of either sign and a NaN scale all become the kernel's positive quiet NaN."""
    payload = torch.full((2, 64), 0x38, dtype=torch.uint8)  # 1.0
    payload[0, :4] = torch.tensor([0x7F, 0xFF, 0xB8, 0x00], dtype=torch.uint8)
    scales = torch.tensor([[127, 255], [255, 127]], dtype=torch.uint8)
    out = reference.dequantize(payload, scales, dtype)
    nan = out.isnan()
    assert nan.sum() == 2 + 32 + 32
    assert (out.view(bits)[nan].to(torch.int64) & (1 << 8 * out.element_size()) - 1).unique().tolist() == [nan_bits]
    assert out[~nan].eq(torch.tensor([-1.0, 0.0, 1.0], dtype=dtype).unsqueeze(1)).any(0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_kernel_dequantize_bits_equal_the_reference_including_nan(dtype: torch.dtype) -> None:
    """Raw 0x7F / 0xFF payload bytes (never produced by quantize) and NaN scales, kernel vs reference."""
    from kvdoctor.mxfp8 import MXFP8Tensor, dequantize

    payload = torch.arange(256, dtype=torch.uint8).repeat(2).reshape(4, 128)
    scales = torch.tensor([[0, 127, 254, 255]] * 4, dtype=torch.uint8)
    t = MXFP8Tensor(payload=payload.view(torch.float8_e4m3fn), scales=scales)
    kernel = dequantize(t, dtype, backend="triton")
    ref = dequantize(t, dtype, backend="torch")
    width = torch.int32 if dtype == torch.float32 else torch.int16
    assert torch.equal(kernel.view(width), ref.view(width))
