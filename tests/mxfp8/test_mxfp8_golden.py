"""Hand-derived byte-exact golden blocks for each scale mode (mxfp8.md §7.1, §2.4, §3).

Notation: E(a) = biased fp32 exponent of a; RCEIL byte = exponent of fl(amax * fl(1/448)) rounded
up (mxfp8.md §2.1); FLOOR byte = max(E(amax) - 8, 0); SGLANG byte = min(RCEIL(max(amax, 1e-30)), 254).
Payload = RNE_satfinite_E4M3(x * 2^(127 - byte)); NaN payload is the canonical 0x7F.
"""

from __future__ import annotations

import math

import pytest
import torch
from mxfp8_impls import IMPLS, f32_from_bits

INF, NAN = math.inf, math.nan
F32_MAX_BITS = 0x7F7FFFFF


def fill(value: float, n: int = 32) -> list[float]:
    return [value] * n


def first_then(first: float, rest: float) -> list[float]:
    return [first] + [rest] * 31


# (name, dtype, 32 inputs (floats, or ("bits", [fp32 bit patterns])), {mode: (scale, payload)})
# payload is an int (all 32 bytes equal) or a list of 32 ints.
CASES = [
    # all zero: amax 0 -> FLOOR/RCEIL byte 0; SGLang clamps amax to 1e-30: ceil(log2(1e-30/448))
    # = -108 -> 19.  0 * anything = 0.
    ("zero", torch.float32, fill(0.0), {"floor": (0, 0), "rceil": (0, 0), "sglang": (19, 0)}),
    # 2^-126 everywhere: FLOOR E=1 -> max(1-8, 0) = 0; RCEIL d = 2^-126/448 ~ 2^-134.8 <= 2^-127
    # -> 0.  x * 2^127 = 2.0 -> 0x40.  SGLang byte 19: x * 2^108 = 2^-18 -> underflows to 0x00.
    ("smallest normal", torch.float32, fill(2.0**-126), {"floor": (0, 0x40), "rceil": (0, 0x40), "sglang": (19, 0x00)}),
    # one +Inf among 1.0: FLOOR/RCEIL -> 0xFF and the whole block NaN.  SGLang: amax Inf -> 254;
    # Inf * 2^-127 = Inf -> saturates 0x7E; 1.0 * 2^-127 -> 0x00.
    (
        "mixed inf",
        torch.float32,
        first_then(INF, 1.0),
        {"floor": (255, 0x7F), "rceil": (255, 0x7F), "sglang": (254, [0x7E] + [0x00] * 31)},
    ),
    # one NaN among 1.0: FLOOR/RCEIL NaN counts as Inf -> 0xFF, all NaN.  SGLang ignores the NaN:
    # amax 1 -> d = fl(1/448) = 1.14*2^-9, E=118, M!=0 -> 119; 1.0 * 2^8 = 256 -> 0x78.
    (
        "mixed nan",
        torch.float32,
        first_then(NAN, 1.0),
        {"floor": (255, 0x7F), "rceil": (255, 0x7F), "sglang": (119, [0x7F] + [0x78] * 31)},
    ),
    # negative NaN in sglang mode is still the canonical 0x7F.
    (
        "negative nan",
        torch.float32,
        first_then(-NAN, 1.0),
        {"sglang": (119, [0x7F] + [0x78] * 31), "rceil": (255, 0x7F)},
    ),
    # all NaN: FLOOR/RCEIL 0xFF; SGLang sees amax 0 -> 19, payload NaN.
    ("all nan", torch.float32, fill(NAN), {"floor": (255, 0x7F), "rceil": (255, 0x7F), "sglang": (19, 0x7F)}),
    # +/-448: E(448)=135 -> FLOOR 127; RCEIL 448*fl(1/448) = 1.0 exactly -> 127.  Payload 448.
    (
        "fp8 max",
        torch.float32,
        [448.0, -448.0] * 16,
        {m: (127, [0x7E, 0xFE] * 16) for m in ("floor", "rceil", "sglang")},
    ),
    # fp32 max 2^128(1-2^-24): FLOOR E=254 -> 246, x*2^-119 = 512(1-2^-24) saturates to 448;
    # RCEIL d = 2^119.2 -> E=246, M!=0 -> 247, x*2^-120 = 256(1-2^-24) rounds to 256 = 0x78.
    (
        "fp32 max",
        torch.float32,
        ("bits", [F32_MAX_BITS, F32_MAX_BITS | 0x80000000] * 16),
        {"floor": (246, [0x7E, 0xFE] * 16), "rceil": (247, [0x78, 0xF8] * 16), "sglang": (247, [0x78, 0xF8] * 16)},
    ),
    # bf16 max 0x7F7F = 2^127*1.9921875: FLOOR 246, x*2^-119 = 510 -> 448 (0x7E); RCEIL 247,
    # x*2^-120 = 255 -> RNE to 256 (0x78).
    (
        "bf16 max",
        torch.bfloat16,
        fill(torch.finfo(torch.bfloat16).max),
        {"floor": (246, 0x7E), "rceil": (247, 0x78), "sglang": (247, 0x78)},
    ),
    # fp32 2^-149: FLOOR E=0 -> 0; RCEIL d subnormal, tiny -> 0.  x * 2^127 = 2^-22 -> 0x00.
    (
        "fp32 smallest subnormal",
        torch.float32,
        fill(2.0**-149),
        {"floor": (0, 0x00), "rceil": (0, 0x00), "sglang": (19, 0x00)},
    ),
    # bf16 2^-133: byte 0, x * 2^127 = 2^-6 = smallest E4M3 normal 0x08.
    (
        "bf16 smallest subnormal",
        torch.bfloat16,
        fill(2.0**-133),
        {"floor": (0, 0x08), "rceil": (0, 0x08), "sglang": (19, 0x00)},
    ),
    # 1.0s and one -2^-149: amax 1 -> 119 in every mode; 1.0*2^8 = 256 (0x78); the tiny negative
    # underflows to -0 (0x80).
    (
        "mixed underflow",
        torch.float32,
        [-(2.0**-149)] + [1.0] * 31,
        {m: (119, [0x80] + [0x78] * 31) for m in ("floor", "rceil", "sglang")},
    ),
    # one fp32 max among 1.0s: FLOOR 246 -> 0x7E, 1.0*2^-119 -> 0; RCEIL 247 -> 0x78, rest 0.
    (
        "saturation and underflow",
        torch.float32,
        ("bits", [F32_MAX_BITS] + [0x3F800000] * 31),
        {"floor": (246, [0x7E] + [0] * 31), "rceil": (247, [0x78] + [0] * 31), "sglang": (247, [0x78] + [0] * 31)},
    ),
    # 3.5 + 1 ulp (0x40600001): RCEIL d = 2^-7 * (1 + tiny) -> 121, x*2^6 = 224.00003 -> 224 (0x76);
    # FLOOR E=128 -> 120, x*2^7 = 448.0001 -> 0x7E.
    (
        "rceil premature",
        torch.float32,
        ("bits", [0x40600001] * 32),
        {"floor": (120, 0x7E), "rceil": (121, 0x76), "sglang": (121, 0x76)},
    ),
    # just under 512 (0x43FFFFFF): FLOOR E=135 -> 127, 511.99997 saturates (0x7E); RCEIL
    # 512/448 -> 2^1 -> 128, 255.99998 -> 256 (0x78).
    (
        "floor premature",
        torch.float32,
        ("bits", [0x43FFFFFF] * 32),
        {"floor": (127, 0x7E), "rceil": (128, 0x78), "sglang": (128, 0x78)},
    ),
    # +/-480: FLOOR 127, 480 saturates to 448; RCEIL 480/448 -> 2^1 -> 128, 240 = 0x77.
    (
        "satfinite",
        torch.float32,
        [480.0, -480.0] * 16,
        {"floor": (127, [0x7E, 0xFE] * 16), "rceil": (128, [0x77, 0xF7] * 16), "sglang": (128, [0x77, 0xF7] * 16)},
    ),
    # 896 = 448*2: RCEIL d = 2.0 exactly -> 128 (keeps the lower exponent), FLOOR E=136 -> 128.
    ("amax 448*2", torch.float32, fill(896.0), {m: (128, 0x7E) for m in ("floor", "rceil", "sglang")}),
    # Scale 127 (448 present) so x is encoded as is: 2^-10 is a tie -> 0 (even); 3*2^-10 -> 2*2^-9
    # (0x02); 15.5 ties to 16 (0x58: carries into the next binade); 232 ties to 224 (0x76);
    # -0.0 -> 0x80; 1.0 -> 0x38.
    (
        "element rounding",
        torch.float32,
        [448.0, 2.0**-10, 3 * 2.0**-10, 15.5, 232.0, -0.0] + [1.0] * 26,
        {m: (127, [0x7E, 0x00, 0x02, 0x58, 0x76, 0x80] + [0x38] * 26) for m in ("floor", "rceil", "sglang")},
    ),
    # amax 464 just above 448: FLOOR E=135 -> 127, 449 and 464 saturate to 448 (0x7E), 1.0 0x38.
    # RCEIL 464/448 -> 2^1 -> 128: 224.5 -> 224 (0x76), 232 ties to 224 (0x76), 0.5 -> 0x30.
    (
        "just above 448",
        torch.float32,
        [449.0, 464.0] + [1.0] * 30,
        {
            "floor": (127, [0x7E, 0x7E] + [0x38] * 30),
            "rceil": (128, [0x76, 0x76] + [0x30] * 30),
            "sglang": (128, [0x76, 0x76] + [0x30] * 30),
        },
    ),
]


def _input(spec: object, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(spec, tuple):
        return f32_from_bits(spec[1]).to(dtype)
    return torch.tensor(spec, dtype=torch.float32).to(dtype)


PARAMS = [
    pytest.param(name, dtype, values, mode, want, id=f"{name}-{mode}")
    for name, dtype, values, modes in CASES
    for mode, want in modes.items()
]


@pytest.mark.parametrize("impl", sorted(IMPLS))
@pytest.mark.parametrize(("name", "dtype", "values", "mode", "want"), PARAMS)
def test_golden_block(
    impl: str, name: str, dtype: torch.dtype, values: object, mode: str, want: tuple[int, int | list[int]]
) -> None:
    x = _input(values, dtype).view(1, 32)
    payload, scales = IMPLS[impl](x, mode)
    scale, expected = want
    expected_bytes = expected if isinstance(expected, list) else [expected] * 32
    assert scales.tolist() == [[scale]], name
    assert payload.view(-1).tolist() == expected_bytes, name


def test_nan_blocks_do_not_leak_into_neighbours() -> None:
    """torchao: a NaN makes only its own block NaN (mxfp8.md §7.3)."""
    x = torch.ones(2, 64)
    x[0, 3] = NAN
    for impl in IMPLS.values():
        payload, scales = impl(x, "rceil")
        assert scales.tolist() == [[255, 119], [119, 119]]
        assert payload[0, :32].unique().tolist() == [0x7F]
        assert payload[0, 32:].unique().tolist() == [0x78]
