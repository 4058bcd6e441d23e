"""Fused quantize-and-scatter into an SGLang-style paged pool with FA4 interleaved scales."""

from __future__ import annotations

import pytest
import torch
from mxfp8_impls import KERNEL_DEVICE

from kvdoctor import mxfp8
from kvdoctor._exceptions import InputError

PAGE = 64
HEADS = 2
HEAD_DIM = 64  # SF = 2
ROWS = 4 * PAGE


def _pool(device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    payload = torch.full((ROWS, HEADS, HEAD_DIM), 0xAB, dtype=torch.uint8, device=device)
    scales = torch.full((ROWS * HEADS * HEAD_DIM // 32,), 0xCD, dtype=torch.uint8, device=device)
    return payload, scales


def _rows(n: int, dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n, HEADS, HEAD_DIM, generator=gen) * 10).to(dtype)


# Slot 0 (padding), page boundaries 31/32 and 63/64, last slot, a non-contiguous unsorted order.
LOC = torch.tensor([0, 31, 32, 63, 64, 200, 5, ROWS - 1, 130], dtype=torch.int64)


def test_scale_offsets_match_the_documented_formula() -> None:
    """mxfp8.md §5 example: PAGE 128, head_dim 128 (SF 4): ((loc//128)*NKV + h)*512
    + (loc % 32)*16 + ((loc % 128)//32)*4 + j."""
    loc = torch.tensor([0, 1, 31, 32, 127, 128, 300])
    got = mxfp8.scale_offsets(loc, 3, 128, 128)
    for i, slot in enumerate(loc.tolist()):
        for h in range(3):
            for j in range(4):
                want = ((slot // 128) * 3 + h) * 512 + (slot % 32) * 16 + ((slot % 128) // 32) * 4 + j
                assert int(got[i, h, j]) == want


def test_scale_offsets_cover_the_pool_exactly_once() -> None:
    offsets = mxfp8.scale_offsets(torch.arange(ROWS), HEADS, HEAD_DIM, PAGE).flatten()
    assert torch.equal(offsets.sort().values, torch.arange(ROWS * HEADS * HEAD_DIM // 32))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("mode", ["sglang", "rceil", "floor"])
def test_kernel_scatter_writes_the_reference_bytes(dtype: torch.dtype, mode: str) -> None:
    x = _rows(len(LOC), dtype)
    ref_payload, ref_scales = _pool()
    mxfp8.quantize_scatter(x, LOC, ref_payload, ref_scales, page_size=PAGE, scale_mode=mode, backend="torch")
    payload, scales = _pool(KERNEL_DEVICE)
    mxfp8.quantize_scatter(
        x.to(KERNEL_DEVICE), LOC.to(KERNEL_DEVICE), payload, scales, page_size=PAGE, scale_mode=mode, backend="triton"
    )
    assert torch.equal(payload.cpu(), ref_payload)
    assert torch.equal(scales.cpu(), ref_scales)


def test_scatter_bytes_equal_plain_quantize_gathered_through_offsets() -> None:
    x = _rows(len(LOC))
    payload, scales = _pool()
    mxfp8.quantize_scatter(x, LOC, payload, scales, page_size=PAGE, scale_mode="rceil")
    live = LOC != 0
    t = mxfp8.quantize(x[live], scale_mode="rceil")
    assert torch.equal(payload[LOC[live]], t.payload.view(torch.uint8))
    gathered = scales[mxfp8.scale_offsets(LOC[live], HEADS, HEAD_DIM, PAGE)]
    assert torch.equal(gathered, t.scales)
    # Teeth: reading a slot's scales as rows of a (rows, H, SF) view is wrong for this layout.
    naive = scales.view(ROWS, HEADS, HEAD_DIM // 32)[LOC[live]]
    assert not torch.equal(naive, t.scales)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_padding_slot_zero_is_never_written_by_default(backend: str) -> None:
    device = KERNEL_DEVICE if backend == "triton" else "cpu"
    payload, scales = _pool(device)
    loc = torch.tensor([0, 1], device=device)
    mxfp8.quantize_scatter(_rows(2).to(device), loc, payload, scales, page_size=PAGE, backend=backend)
    slot0 = mxfp8.scale_offsets(torch.tensor([0]), HEADS, HEAD_DIM, PAGE).flatten()
    assert (payload[0] == 0xAB).all() and (scales.cpu()[slot0] == 0xCD).all()
    assert not (payload[1] == 0xAB).all()
    mxfp8.quantize_scatter(
        _rows(2).to(device), loc, payload, scales, page_size=PAGE, backend=backend, skip_padding_slot=False
    )
    assert not (payload[0] == 0xAB).all()  # teeth: the flag is what protects slot 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"x": torch.zeros(2, HEADS, 48)}, "head_dim must be a multiple of 32"),
        ({"page_size": 48}, "page_size must be a positive multiple of 32"),
        ({"x": torch.zeros(2, HEADS, HEAD_DIM, dtype=torch.float64)}, "bf16, fp16 or fp32"),
        ({"loc": torch.tensor([1, ROWS])}, "outside the pool"),
        ({"scales": torch.zeros(7, dtype=torch.uint8)}, "flat uint8"),
        ({"scale_mode": "ceil"}, "unknown MXFP8 scale_mode"),
    ],
)
def test_scatter_rejects_bad_input(kwargs: dict[str, object], message: str) -> None:
    payload, scales = _pool()
    args: dict[str, object] = {
        "x": _rows(2),
        "loc": torch.tensor([1, 2]),
        "payload": payload,
        "scales": scales,
        "page_size": PAGE,
    }
    args.update(kwargs)
    if "x" in kwargs and args["x"].shape[-1] != HEAD_DIM:  # type: ignore[union-attr]
        args["payload"] = torch.zeros(ROWS, HEADS, 48, dtype=torch.uint8)
    with pytest.raises(InputError, match=message):
        mxfp8.quantize_scatter(**args)  # type: ignore[arg-type]


def test_quantize_rejects_bad_input() -> None:
    with pytest.raises(InputError, match="last dim divisible by 32"):
        mxfp8.quantize(torch.zeros(4, 40))
    with pytest.raises(InputError, match="bf16, fp16 or fp32"):
        mxfp8.quantize(torch.zeros(4, 32, dtype=torch.int32))
    with pytest.raises(InputError, match="unknown MXFP8 backend"):
        mxfp8.quantize(torch.zeros(4, 32), backend="cuda")


def test_large_tensor_spans_many_programs() -> None:
    """More blocks than one program handles, with a ragged tail, through both backends."""
    x = (torch.randn(37, 3 * 32 * 41) * 3).to(torch.bfloat16)  # 3813 blocks, 128 per program
    ref = mxfp8.quantize(x, scale_mode="rceil", backend="torch")
    got = mxfp8.quantize(x.to(KERNEL_DEVICE), scale_mode="rceil", backend="triton")
    assert torch.equal(got.scales.cpu(), ref.scales)
    assert torch.equal(got.payload.view(torch.uint8).cpu(), ref.payload.view(torch.uint8))
    back = mxfp8.dequantize(got, torch.bfloat16, backend="triton").cpu()
    assert torch.equal(back, mxfp8.dequantize(ref, torch.bfloat16, backend="torch"))


def test_triton_on_cpu_without_the_interpreter_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(InputError, match="TRITON_INTERPRET=1"):
        mxfp8.quantize(torch.zeros(1, 32), backend="triton")
    assert mxfp8.resolve_backend("auto", torch.device("cpu")) == "torch"
    assert mxfp8.resolve_backend("auto", torch.device("cuda", 0)) == "triton"


def test_scatter_with_a_non_power_of_two_scale_count() -> None:
    """head_dim 96 (SF = 3, padded to 4 lanes in the kernel) and the smallest page, 32."""
    x = (torch.randn(5, 3, 96, generator=torch.Generator().manual_seed(2)) * 7).to(torch.float16)
    loc = torch.tensor([33, 1, 63, 32, 10])
    ref_payload = torch.zeros(64, 3, 96, dtype=torch.uint8)
    ref_scales = torch.zeros(64 * 3 * 3, dtype=torch.uint8)
    mxfp8.quantize_scatter(x, loc, ref_payload, ref_scales, page_size=32, backend="torch")
    payload = torch.zeros_like(ref_payload, device=KERNEL_DEVICE)
    scales = torch.zeros_like(ref_scales, device=KERNEL_DEVICE)
    mxfp8.quantize_scatter(x.to(KERNEL_DEVICE), loc.to(KERNEL_DEVICE), payload, scales, page_size=32, backend="triton")
    assert torch.equal(payload.cpu(), ref_payload) and torch.equal(scales.cpu(), ref_scales)
    assert int((ref_scales != 0).sum()) == 5 * 3 * 3  # every written scale is a real (non-0) byte
