"""The retraction protocol's contract with the pools, the padding slot, SWA windows and chunking."""

from __future__ import annotations

import pytest
import torch

from kvdoctor._exceptions import InputError
from kvdoctor.core.sglang.policy import backup_carries
from kvdoctor.roundtrip.options import Reductions
from kvdoctor.state.diff import PADDING, RESIDENT, capture_padding
from kvdoctor.state.fill import fill_background, fill_requests
from kvdoctor.state.host_copy import CopyLedger, Mover
from kvdoctor.state.pools import admit, build_pools, plan_sizes, reduced_geometry, release
from kvdoctor.state.retraction import Session, default_protocol
from tests.state.helpers import analysis, roundtrip, row


def _offload_one(model: str, dtype: str = "auto", *flags: str):
    a = analysis(model, dtype, *flags)
    geo = reduced_geometry(a, Reductions(layers=1, heads=1))
    pools = build_pools(a, geo, plan_sizes(2, 1, 16, a.flags.page_size, geo.window), torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    fill_background(pools, gen)
    req = admit(pools, 0, 16)
    fill_requests(pools, [req], gen, a.spec.kv_dtype)
    proto = default_protocol(a.layout, "cpu_tensor")
    carries = frozenset(backup_carries("host_pool", a.spec, a.layout, a.flags.page_size))
    return proto.backend.offload(proto, Session(pools, Mover(pools.device), CopyLedger(), carries), req)


def test_pool_that_carries_mamba_backs_it_up_itself() -> None:
    backup = _offload_one("qwen3-next-80b-a3b")  # HybridLinearKVPool: cpu_copy_carries_mamba True
    assert backup.kv.mamba is not None
    assert backup.mamba_cpu is None


def test_pool_that_does_not_carry_mamba_leaves_it_to_the_caller() -> None:
    backup = _offload_one("inkling-small")  # SWAKVPool: cpu_copy_carries_mamba False
    assert backup.kv.mamba is None
    assert backup.mamba_cpu is not None
    assert backup.kv.swa is not None and backup.kv.full is not None


def test_attention_only_model_has_no_mamba_backup() -> None:
    backup = _offload_one("llama-3.1-8b", "bf16", "--disaggregation-decode-retraction-backup", "cpu_tensor")
    assert backup.kv.mamba is None and backup.mamba_cpu is None


def test_padding_slot_and_residents_are_compared_and_untouched() -> None:
    result = roundtrip("inkling-small", "mxfp8", "--page-size", "128")
    assert result.used.restored_into_new_slots is True
    pad, resident = row(result, PADDING), row(result, RESIDENT)
    assert pad.bytes > 0 and pad.equal
    assert resident.bytes > 0 and resident.equal


def test_padding_capture_sees_a_write_to_slot_zero() -> None:
    a = analysis("inkling-small", "mxfp8")
    geo = reduced_geometry(a, Reductions(layers=1, heads=1))
    pools = build_pools(a, geo, plan_sizes(2, 1, 8, 1, geo.window), torch.device("cpu"))
    fill_background(pools, torch.Generator().manual_seed(1))
    before = capture_padding(pools)
    assert pools.mamba is not None
    pools.mamba.planes[0].data[:, 0] ^= 1
    after = capture_padding(pools)
    assert not torch.equal(before.planes["conv_state.conv0"], after.planes["conv_state.conv0"])


def test_freed_slots_are_reused_by_the_next_request() -> None:
    a = analysis("llama-3.1-8b", "bf16")
    geo = reduced_geometry(a, Reductions(layers=1, heads=1))
    pools = build_pools(a, geo, plan_sizes(2, 1, 8, 1, geo.window), torch.device("cpu"))
    first = admit(pools, 0, 8)
    admit(pools, 1, 8)
    release(pools, first)
    third = admit(pools, 2, 8)
    assert third.full_pages == first.full_pages


def test_sliding_window_keeps_only_the_tail() -> None:
    # gpt-oss: window 128; 300-token requests map only their tail into the SWA sub-pool.
    result = roundtrip(
        "gpt-oss-20b", "bf16", "--disaggregation-decode-retraction-backup", "cpu_tensor", tokens=300, requests=3
    )
    assert result.ok
    assert 0 < row(result, "swa_kv").bytes < row(result, "full_kv").bytes


def test_small_chunks_and_pages_still_round_trip() -> None:
    result = roundtrip("inkling-small", "mxfp8", "--page-size", "128", chunk=7, tokens=300, requests=3)
    assert result.ok
    result = roundtrip("nemotron-h-8b", "fp8_e4m3", "--page-size", "16", chunk=5, tokens=70)
    assert result.ok


def test_host_pool_backend_on_a_recurrent_model_shows_the_loss() -> None:
    result = roundtrip(
        "inkling-small", "mxfp8", "--page-size", "128", "--disaggregation-decode-retraction-backup", "host_pool"
    )
    assert result.backend == "host_pool"
    assert result.failing == ["conv_state"]


def test_host_pool_drops_flat_mxfp8_scales_as_core_predicts() -> None:
    result = roundtrip("llama-3.1-8b", "mxfp8")  # page 1: flat scales, plain MHA host pool
    assert result.backend == "host_pool"
    assert result.failing == ["full_kv_scales"]


def test_fp4_pools_are_refused() -> None:
    with pytest.raises(InputError, match="nvfp4"):
        roundtrip("llama-3.1-8b", "nvfp4")


def test_backend_none_is_refused() -> None:
    with pytest.raises(InputError, match="none"):
        roundtrip("llama-3.1-8b", "bf16", "--disaggregation-decode-retraction-backup", "none")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal when CUDA is absent")
def test_cuda_without_cuda_is_refused() -> None:
    from kvdoctor.state.run import resolve_device

    with pytest.raises(InputError, match="CUDA"):
        resolve_device("cuda")


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(InputError, match="requests"):
        roundtrip("llama-3.1-8b", requests=1)
    with pytest.raises(InputError, match="tokens"):
        roundtrip("llama-3.1-8b", tokens=1)


def test_pools_use_cores_typed_store_dtype_not_its_display_string() -> None:
    import dataclasses

    from kvdoctor.state.pools import storage_dtype

    assert storage_dtype("bfloat16") is torch.bfloat16 and storage_dtype("float8_e4m3fn") is torch.uint8
    a = analysis("llama-3.1-8b", "bf16")
    kv = dataclasses.replace(a.spec.kv_dtype, payload="bf16 (shown to people)", store_dtype="float16")
    a = dataclasses.replace(a, spec=dataclasses.replace(a.spec, kv_dtype=kv))
    geo = reduced_geometry(a, Reductions(layers=1, heads=1))
    pools = build_pools(a, geo, plan_sizes(2, 1, 8, 1, geo.window), torch.device("cpu"))
    assert pools.full is not None and pools.full.element_dtype is torch.float16


def test_scale_block_comes_from_the_kv_dtype_rule() -> None:
    a = analysis("inkling-small", "mxfp8", "--page-size", "128")
    geo = reduced_geometry(a, Reductions(layers=1, heads=1))
    pools = build_pools(a, geo, plan_sizes(2, 1, 8, 128, geo.window), torch.device("cpu"))
    assert pools.full is not None and geo.full is not None
    layout = pools.full.scale_layouts["k_scale"]
    assert layout.block == a.spec.kv_dtype.scale_block
    assert layout.sf * layout.block == geo.full.shapes[0][1]
