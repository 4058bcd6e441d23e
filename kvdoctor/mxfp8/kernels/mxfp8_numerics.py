"""Integer-exact MXFP8 numerics shared by the quantize, dequantize and scatter kernels.

Why integers: the Triton interpreter (the CI backend) rounds fp32 -> fp8 half-up, drops mantissa
carries and does not saturate, and GPU ``tl.log2`` / fp32 ``/`` are approximate.  Every value here is
computed from fp32 *bits* with integer and/or/shift/add, plus exactly one fp32 multiply by a power of
two (exact) and one by the constant fl(1/448) (IEEE round-to-nearest on every backend), so the
interpreter, the GPU and the torch reference produce the same bytes.  See mxfp8.md §4.

Scale modes are a ``tl.constexpr`` int: 0 = sglang, 1 = rceil, 2 = floor (``MODE_IDS``).
"""

from __future__ import annotations

import triton
import triton.language as tl

MODE_IDS: dict[str, int] = {"sglang": 0, "rceil": 1, "floor": 2}

# fp32 bit patterns used below (checked against torch in tests/mxfp8/test_mxfp8_numerics.py).
INV_448_BITS = tl.constexpr(0x3B124925)  # fl(1/448)
SGLANG_AMAX_FLOOR_BITS = tl.constexpr(0x0DA24260)  # fl(1e-30): SGLang's lower clamp on amax
E4M3_MAX_BITS = tl.constexpr(0x43E00000)  # 448.0
F32_INF_BITS = tl.constexpr(0x7F800000)
F32_QNAN_BITS = tl.constexpr(0x7FC00000)
TWO_POW_M127_BITS = tl.constexpr(0x00400000)  # 2^-127, the fp32 subnormal scale byte 0 stands for


@triton.jit
def block_amax_bits(abs_bits, MODE: tl.constexpr):
    """Max |x| of each 32-block (last axis) as fp32 bits, with the NaN policy applied first.

    An integer max over |bits| is exact on every backend (no NaN-propagating vs NaN-dropping max).
    NaN bits sort above +Inf, so for rceil/floor a NaN simply wins and acts as Inf (the block
    becomes 0xFF); for sglang a NaN is zeroed first so it is ignored, as SGLang's GPU kernel does.
    """
    if MODE == 0:
        abs_bits = tl.where(abs_bits > F32_INF_BITS, 0, abs_bits)
    return tl.max(abs_bits, axis=1)


@triton.jit
def _rceil_byte(d_bits):
    """Biased E8M0 exponent of 2^ceil(log2 d) for d >= 0 given as fp32 bits (255 if d is Inf)."""
    exp = d_bits >> 23
    man = d_bits & 0x7FFFFF
    normal = exp + (man != 0).to(tl.int32)
    subnormal = (man > 0x400000).to(tl.int32)
    byte = tl.where(exp == 0, subnormal, normal)
    return tl.minimum(byte, 255)


@triton.jit
def scale_byte(amax_bits, MODE: tl.constexpr):
    """E8M0 scale byte (int32 in [0, 255]) of each block from its amax bits, per scale mode."""
    inv_448 = tl.full(amax_bits.shape, INV_448_BITS, tl.int32).to(tl.float32, bitcast=True)
    if MODE == 2:  # floor: floor(log2 amax) - 8, from the exponent field of amax itself
        byte = tl.maximum((amax_bits >> 23) - 8, 0)
        byte = tl.where(amax_bits >= F32_INF_BITS, 255, byte)
    else:
        if MODE == 0:  # sglang: amax clamped up to 1e-30, Inf clamped to 254, never 255
            amax_bits = tl.maximum(amax_bits, SGLANG_AMAX_FLOOR_BITS)
        amax = amax_bits.to(tl.float32, bitcast=True)
        d_bits = (amax * inv_448).to(tl.int32, bitcast=True)
        byte = _rceil_byte(d_bits)
        if MODE == 0:  # noqa: SIM108 (constexpr branches, not a runtime select)
            byte = tl.minimum(byte, 254)
        else:
            byte = tl.where(amax_bits >= F32_INF_BITS, 255, byte)
    return byte


@triton.jit
def inverse_scale(byte):
    """fp32 2^(127 - byte) built from bits: 254 -> 2^-127 (subnormal), 255 -> NaN."""
    bits = (254 - byte) << 23
    bits = tl.where(byte == 254, TWO_POW_M127_BITS, bits)
    bits = tl.where(byte == 255, F32_QNAN_BITS, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def scale_value(byte):
    """fp32 2^(byte - 127) built from bits: 0 -> 2^-127 (subnormal), 255 -> NaN."""
    bits = byte << 23
    bits = tl.where(byte == 0, TWO_POW_M127_BITS, bits)
    bits = tl.where(byte == 255, F32_QNAN_BITS, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def encode_e4m3(v):
    """fp32 -> E4M3 byte (int32) by integer round-to-nearest-even with satfinite; NaN -> 0x7F.

    Normal range: the 20 dropped mantissa bits are rounded with the (x + half - 1 + lsb) >> s
    trick on the whole exponent|mantissa field, so a mantissa carry moves into the exponent.
    Subnormal range (|v| < 2^-6): the 24-bit significand is shifted right by 141 - E (capped at
    25, which always yields 0) with the same rule.  Both candidates are computed for every lane
    and one is selected, so the shift is clamped to [21, 25] to stay defined where it is unused.
    """
    bits = v.to(tl.int32, bitcast=True)
    mag = bits & 0x7FFFFFFF
    sign = (bits >> 24) & 0x80
    exp = mag >> 23
    normal = ((mag + 0x7FFFF + ((mag >> 20) & 1)) >> 20) - 960
    shift = tl.minimum(tl.maximum(141 - exp, 21), 25)  # in range even where unused
    sig = (mag & 0x7FFFFF) | 0x800000
    subnormal = (sig + (1 << (shift - 1)) - 1 + ((sig >> shift) & 1)) >> shift
    field = tl.where(exp >= 121, normal, subnormal)
    field = tl.where(mag >= E4M3_MAX_BITS, 0x7E, field)
    return tl.where(mag > F32_INF_BITS, 0x7F, field | sign)


@triton.jit
def decode_e4m3(q):
    """E4M3 byte (int32 in [0, 255]) -> fp32, exactly; 0x7F / 0xFF -> NaN."""
    field = q & 0x7F
    exp = field >> 3
    man = q & 7
    normal = (((exp + 120) << 23) | (man << 20)).to(tl.float32, bitcast=True)
    subnormal = man.to(tl.float32) * 0.001953125  # m * 2^-9, exact
    mag = tl.where(exp == 0, subnormal, normal)
    nan = tl.full(q.shape, F32_QNAN_BITS, tl.int32).to(tl.float32, bitcast=True)
    mag = tl.where(field == 0x7F, nan, mag)
    return tl.where((q & 0x80) != 0, -mag, mag)


@triton.jit
def bf16_bits_rne(v):
    """fp32 -> bf16 bit pattern (int32 low 16 bits) by integer round-to-nearest-even.

    The interpreter's fp32 -> bf16 cast truncates while GPUs round to nearest even; dequantized MX
    values are exact in bf16 except far in the subnormal range, where this keeps backends equal.
    """
    bits = v.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    is_nan = (bits & 0x7FFFFFFF) > F32_INF_BITS
    return tl.where(is_nan, 0x7FC0, rounded & 0xFFFF)
