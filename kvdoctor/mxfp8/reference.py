"""Torch reference codec: the definition of every MXFP8 byte kvdoctor writes (no Triton).

Two layers:
* the *rules*, in integer bit operations on int32 tensors (``scale_bytes``, ``encode_e4m3``,
  ``inverse_scale``, ``scale_value``), mirrored line for line by ``kvdoctor.mxfp8.kernels.mxfp8_numerics``;
* ``quantize`` / ``dequantize``: the fast path pools and benchmarks use.  It applies the same scale
  rule but lets torch's own (RNE, satfinite) fp8 cast encode the exactly scaled values, in
  cache-sized chunks.  Tests prove it byte-equal to ``quantize_exact`` (the integer rules end to
  end) and to the Triton kernel, so three independent encoders agree.
"""

from __future__ import annotations

import functools

import torch

from kvdoctor.mxfp8.format import BLOCK, E4M3_NAN, E8M0_NAN
from kvdoctor.mxfp8.layout import scale_offsets

INV_448_BITS = 0x3B124925  # fl(1/448)
SGLANG_AMAX_FLOOR_BITS = 0x0DA24260  # fl(1e-30)
E4M3_MAX_BITS = 0x43E00000  # 448.0
F32_INF_BITS = 0x7F800000
F32_QNAN_BITS = 0x7FC00000
TWO_POW_M127_BITS = 0x00400000

CPU_CHUNK_ELEMENTS = 1 << 19  # ~1-2 MB of input per step: CPU intermediates stay in cache
GPU_CHUNK_ELEMENTS = 1 << 28  # on a GPU, chunks only bound the scratch memory

_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
_ABS_MASK = {torch.bfloat16: 0x7FFF, torch.float16: 0x7FFF, torch.float32: 0x7FFFFFFF}
# The one NaN ``dequantize`` writes per dtype: the positive quiet NaN the Triton kernel stores.
# torch's own conversions would leave 0x7FF00000 (fp32), 0x7F80 (fp16) or 0xFFFF (bf16), signed
# by the payload byte, so NaN bits would differ between backends for no meaning.
CANONICAL_NAN_BITS = {torch.float32: F32_QNAN_BITS, torch.float16: 0x7E00, torch.bfloat16: 0x7FC0}


def block_amax_bits(abs_bits: torch.Tensor, scale_mode: str) -> torch.Tensor:
    """Max |x| bits over the last axis after the NaN policy (see ``kvdoctor.mxfp8``)."""
    if scale_mode == "sglang":
        abs_bits = torch.where(abs_bits > F32_INF_BITS, 0, abs_bits)
    return abs_bits.amax(dim=-1)


def rceil_byte(d_bits: torch.Tensor) -> torch.Tensor:
    """Biased exponent of 2^ceil(log2 d), d >= 0 given as fp32 bits; 255 for Inf (mxfp8.md §2.1)."""
    exp = d_bits >> 23
    man = d_bits & 0x7FFFFF
    normal = exp + (man != 0).to(torch.int32)
    subnormal = (man > 0x400000).to(torch.int32)
    return torch.where(exp == 0, subnormal, normal).clamp_(max=255)


def scale_bytes(amax_bits: torch.Tensor, scale_mode: str) -> torch.Tensor:
    """E8M0 byte (int32) per block from its amax as fp32 bits (NaN policy already applied)."""
    amax_bits = amax_bits.to(torch.int32)
    non_finite = amax_bits >= F32_INF_BITS
    if scale_mode == "floor":
        byte = ((amax_bits >> 23) - 8).clamp_(min=0)
        return torch.where(non_finite, E8M0_NAN, byte)
    if scale_mode == "sglang":
        amax_bits = amax_bits.clamp(min=SGLANG_AMAX_FLOOR_BITS)
    inv_448 = torch.tensor(INV_448_BITS, dtype=torch.int32, device=amax_bits.device)
    d_bits = (amax_bits.view(torch.float32) * inv_448.view(torch.float32)).view(torch.int32)
    byte = rceil_byte(d_bits)
    if scale_mode == "sglang":
        return byte.clamp_(max=254)
    return torch.where(non_finite, E8M0_NAN, byte)


def inverse_scale(byte: torch.Tensor) -> torch.Tensor:
    """fp32 2^(127 - byte) from bits: 254 -> 2^-127, 255 -> NaN."""
    byte = byte.to(torch.int32)
    bits = (254 - byte) << 23
    bits = torch.where(byte == 254, TWO_POW_M127_BITS, bits)
    return torch.where(byte == 255, F32_QNAN_BITS, bits).view(torch.float32)


def scale_value(byte: torch.Tensor) -> torch.Tensor:
    """fp32 2^(byte - 127) from bits: 0 -> 2^-127, 255 -> NaN."""
    byte = byte.to(torch.int32)
    bits = torch.where(byte == 0, TWO_POW_M127_BITS, byte << 23)
    return torch.where(byte == 255, F32_QNAN_BITS, bits).view(torch.float32)


def encode_e4m3(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> E4M3 byte by integer round-to-nearest-even, satfinite, NaN -> 0x7F (mxfp8.md §4.3)."""
    bits = v.contiguous().view(torch.int32)
    mag = bits & 0x7FFFFFFF
    exp = mag >> 23
    normal = ((mag + 0x7FFFF + ((mag >> 20) & 1)) >> 20) - 960
    shift = (141 - exp).clamp_(21, 25)  # defined even in lanes that take the normal path
    sig = (mag & 0x7FFFFF) | 0x800000
    subnormal = (sig + (1 << (shift - 1)) - 1 + ((sig >> shift) & 1)) >> shift
    field = torch.where(exp >= 121, normal, subnormal)
    field = torch.where(mag >= E4M3_MAX_BITS, 0x7E, field)
    byte = torch.where(mag > F32_INF_BITS, E4M3_NAN, field | ((bits >> 24) & 0x80))
    return byte.to(torch.uint8)


def decode_e4m3(q: torch.Tensor) -> torch.Tensor:
    """E4M3 byte (uint8) -> exact fp32; 0x7F / 0xFF -> NaN."""
    return q.view(torch.float8_e4m3fn).to(torch.float32)


def quantize_exact(x: torch.Tensor, scale_mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The integer rules end to end: (payload uint8 like x, scales uint8 (..., K // 32)).

    Slow and simple on purpose: the definition the fast path and the kernel are tested against.
    """
    xf = x.to(torch.float32).reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)
    abs_bits = xf.view(torch.int32) & 0x7FFFFFFF
    byte = scale_bytes(block_amax_bits(abs_bits, scale_mode), scale_mode)
    payload = encode_e4m3(xf * inverse_scale(byte).unsqueeze(-1))
    return payload.reshape(x.shape), byte.to(torch.uint8)


@functools.cache
def _cast_saturates(device_type: str) -> bool:
    """torch >= 2.13 casts to float8_e4m3fn with satfinite; older builds need a clamp first."""
    probe = torch.tensor([480.0, -1e30, float("inf")], device=device_type)
    got = probe.to(torch.float8_e4m3fn).view(torch.uint8).tolist()
    return got == [0x7E, 0xFE, 0x7E]


def _amax_f32_bits(raw: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per-block amax bits of the source dtype -> fp32 bits (exact widening)."""
    if dtype == torch.bfloat16:
        return raw.to(torch.int32) << 16
    if dtype == torch.float16:
        return raw.view(torch.float16).to(torch.float32).view(torch.int32)
    return raw


def _step(blocks: torch.Tensor) -> int:
    """Rows (32-blocks) per chunk for this tensor's device, never more than it has."""
    chunk = GPU_CHUNK_ELEMENTS if blocks.is_cuda else CPU_CHUNK_ELEMENTS
    return max(1, min(chunk // BLOCK, blocks.shape[0]))


def _block_amax_raw(blocks: torch.Tensor) -> torch.Tensor:
    """Per-block max |x| as source-dtype bits (NaN bits sort above Inf), chunk by chunk."""
    dtype = blocks.dtype
    raw = torch.empty(blocks.shape[0], dtype=_BITS[dtype], device=blocks.device)
    step = _step(blocks)
    scratch = torch.empty((step, BLOCK), dtype=raw.dtype, device=blocks.device)
    for start in range(0, blocks.shape[0], step):
        chunk = blocks[start : start + step].view(raw.dtype)
        masked = torch.bitwise_and(chunk, _ABS_MASK[dtype], out=scratch[: chunk.shape[0]])
        torch.amax(masked, dim=1, out=raw[start : start + step])
    return raw


@functools.cache
def _byte_table(dtype: torch.dtype, scale_mode: str, device: str) -> torch.Tensor:
    """Scale byte for every 16-bit amax pattern, built once from ``scale_bytes`` (the rule)."""
    patterns = torch.arange(1 << 15, dtype=torch.int32).to(torch.int16)
    return scale_bytes(_amax_f32_bits(patterns, dtype), scale_mode).to(torch.uint8).to(device)


def _scale_bytes_of_blocks(blocks: torch.Tensor, scale_mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale byte per block as uint8, mask of blocks holding a NaN)."""
    raw = _block_amax_raw(blocks)
    dtype = blocks.dtype
    if dtype == torch.float32:
        amax = raw
        has_nan = amax > F32_INF_BITS
        byte = scale_bytes(block_amax_bits(amax.unsqueeze(1), scale_mode), scale_mode)
        byte = byte.to(torch.uint8)
    else:  # 16-bit sources: one gather from a 32768-entry table replaces the whole rule
        byte = _byte_table(dtype, scale_mode, str(blocks.device))[raw.to(torch.int32)]
        has_nan = _amax_f32_bits(raw, dtype) > F32_INF_BITS
    if scale_mode == "sglang" and bool(has_nan.any()):  # NaN is ignored: redo those blocks
        rows = has_nan.nonzero().flatten()
        bits = blocks[rows].to(torch.float32).view(torch.int32) & 0x7FFFFFFF
        byte[rows] = scale_bytes(block_amax_bits(bits, scale_mode), scale_mode).to(torch.uint8)
    return byte, has_nan


def quantize(x: torch.Tensor, scale_mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Fast reference quantize: (payload uint8 shaped like x, scales uint8 (..., K // 32))."""
    x = x.contiguous()
    blocks = x.view(-1, BLOCK)
    byte, has_nan = _scale_bytes_of_blocks(blocks, scale_mode)
    inv = inverse_scale(byte).unsqueeze(1)
    if x.dtype == torch.bfloat16:  # x * 2^k is exact in bf16 over the range that matters
        inv = inv.to(torch.bfloat16)
    payload = torch.empty(blocks.shape, dtype=torch.uint8, device=x.device)
    out = payload.view(torch.float8_e4m3fn)
    step = _step(blocks)
    if _cast_saturates(x.device.type):  # multiply and encode in one pass (cast on store)
        for start in range(0, blocks.shape[0], step):
            rows = slice(start, start + step)
            torch.mul(blocks[rows], inv[rows], out=out[rows])
    else:  # older torch: the eager cast does not saturate, clamp first
        scratch = torch.empty((step, BLOCK), dtype=inv.dtype, device=x.device)
        for start in range(0, blocks.shape[0], step):
            rows = slice(start, start + step)
            scaled = torch.mul(blocks[rows], inv[rows], out=scratch[: blocks[rows].shape[0]])
            out[rows].copy_(scaled.clamp_(-448.0, 448.0))
    fix = (byte == E8M0_NAN) | has_nan
    if bool(fix.any()):  # canonical NaN byte, whatever sign the cast gave
        rows = fix.nonzero().flatten()
        q = payload[rows]
        payload[rows] = torch.where((q & 0x7F) == 0x7F, E4M3_NAN, q)
    return payload.view(x.shape), byte.view(*x.shape[:-1], x.shape[-1] // BLOCK)


def dequantize(payload: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Reference dequantize: E4M3(q) * 2^(byte - 127), exact, rounded once (RNE) to ``dtype``;
    every NaN is ``CANONICAL_NAN_BITS[dtype]``.

    bf16 and fp32 multiply in the output dtype (E4M3 values and the power-of-two scale are exact
    there, so the product is rounded once, like the fp32 product cast); fp16 goes through fp32
    because 2^(byte - 127) overflows fp16.
    """
    blocks = payload.contiguous().view(-1, BLOCK).view(torch.float8_e4m3fn)
    work = torch.float32 if dtype == torch.float16 else dtype
    scale = scale_value(scales.contiguous().view(-1)).unsqueeze(1).to(work)
    out = torch.empty(blocks.shape, dtype=dtype, device=payload.device)
    step = _step(blocks)
    nan = torch.tensor(CANONICAL_NAN_BITS[dtype], dtype=_BITS[dtype], device=payload.device)
    for start in range(0, blocks.shape[0], step):
        values = blocks[start : start + step].to(work).mul_(scale[start : start + step])
        out[start : start + step].copy_(values)
        chunk = out[start : start + step].view(_BITS[dtype])
        chunk.copy_(torch.where(values.isnan(), nan, chunk))
    return out.view(payload.shape)


def quantize_scatter(
    x: torch.Tensor,
    loc: torch.Tensor,
    payload: torch.Tensor,
    scales: torch.Tensor,
    *,
    page_size: int,
    scale_mode: str,
    skip_padding_slot: bool,
) -> None:
    """Quantize (n, H, D) rows and write them to pool slots ``loc`` (interleaved scale layout)."""
    if skip_padding_slot:
        keep = loc != 0
        x, loc = x[keep], loc[keep]
    q, s = quantize(x, scale_mode)
    payload[loc] = q
    offsets = scale_offsets(loc, x.shape[1], x.shape[2], page_size)
    scales.view(-1)[offsets.reshape(-1)] = s.reshape(-1)
