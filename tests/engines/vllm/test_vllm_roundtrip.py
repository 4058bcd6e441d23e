"""``roundtrip --engine vllm``: vLLM 0.33's own CPUOffloadingWorker round-trips every group byte-exact, each fault
turns exactly its rows red, and a shim left out is a one-line exit-2 refusal (no traceback).

Runs in .venv-vllm/ (``make test-vllm``); every ``vllm.*`` object here is the installed wheel's.
"""

from __future__ import annotations

import pytest

from kvdoctor._exceptions import EXIT_INPUT, InputError
from kvdoctor.engines.vllm import _offload_shims as shims
from kvdoctor.engines.vllm.roundtrip import run_vllm_roundtrip

pytestmark = pytest.mark.vllm

DENSE, HYBRID, SLIDING = "llama-3.1-8b", "nemotron-h-8b", "gemma-3-12b"


@pytest.mark.parametrize(
    ("model", "argv", "kinds"),
    [
        (DENSE, (), {"k", "v"}),
        (DENSE, ("--kv-cache-dtype", "fp8"), {"k", "v"}),
        (DENSE, ("--kv-cache-dtype", "fp8_per_token_head"), {"k", "k_scale", "v", "v_scale"}),
        (HYBRID, ("--kv-cache-dtype", "int8_per_token_head"), {"conv_state", "ssm_state", "k_scale", "v_scale"}),
        (HYBRID, (), {"conv_state", "ssm_state", "k", "v"}),
        (SLIDING, (), {"k", "v"}),
    ],
)
def test_clean_round_trip_is_byte_exact_per_group(model: str, argv: tuple[str, ...], kinds: set[str]) -> None:
    r = run_vllm_roundtrip(model, argv)
    assert r.ok and r.failing == [], r.failing
    assert kinds <= {row.component for row in r.rows}
    assert all(row.bytes > 0 and row.mismatched_bytes == 0 for row in r.rows)
    # every group moved out and back exactly its blocks x layers x page bytes, into fresh block ids
    for copy in r.ledger:
        assert copy.bytes_out == copy.bytes_in == copy.expected_bytes > 0
        assert not set(copy.block_ids) & set(copy.new_block_ids)
    assert [s["name"] for s in r.shims] == list(shims.NAMES)


def test_sliding_window_group_moves_only_its_window() -> None:
    r = run_vllm_roundtrip(SLIDING, (), tokens=4096)
    sizes = {c.spec: len(c.block_ids) for c in r.ledger}
    assert sizes["FullAttentionSpec"] == 4096 // 16
    assert sizes["SlidingWindowSpec"] == -(-(1024 - 1) // 16) + 1  # vLLM keeps window - 1 tokens plus one block


@pytest.mark.parametrize("model", [DENSE, HYBRID, SLIDING])
def test_drop_group_turns_exactly_that_group_red(model: str) -> None:
    r = run_vllm_roundtrip(model, inject="drop-group")
    last = max(row.group for row in r.rows)
    assert r.failing and set(r.failing) == set(r.expected_red)
    assert {name.split(".")[0] for name in r.failing} == {f"g{last}"}
    assert r.inject_matched is True


@pytest.mark.parametrize("model", [DENSE, SLIDING])
def test_reorder_blocks_turns_exactly_that_group_red(model: str) -> None:
    r = run_vllm_roundtrip(model, inject="reorder-blocks")
    assert r.failing and set(r.failing) == set(r.expected_red) == {"g0.k", "g0.v"}
    assert all(c.ledger_ok for c in r.ledger)  # the bytes all moved; they landed in the wrong blocks


TOKEN_HEAD = ("fp8_per_token_head", "int8_per_token_head", "int4_per_token_head")


@pytest.mark.parametrize("mode", TOKEN_HEAD)
def test_skip_scales_turns_exactly_the_scale_rows_and_the_ledger_red(mode: str) -> None:
    """The store copies each cell's K and V data but not its fp32 scales: the scales come back as whatever the host
    slots held, the data byte-exact; the ledger is short by exactly the scale bytes."""
    r = run_vllm_roundtrip(DENSE, ("--kv-cache-dtype", mode), inject="skip-scales")
    assert set(r.failing) == set(r.expected_red) == {"g0.k_scale", "g0.v_scale", "g0.ledger"}
    assert r.inject_matched is True
    rows = {row.component: row for row in r.rows}
    for side in ("k", "v"):
        data, scale = rows[side], rows[f"{side}_scale"]
        assert data.ok and data.bytes_out == data.bytes_in == data.bytes and (data.copies_out, data.copies_in) == (1, 1)
        assert not scale.equal and scale.mismatched_bytes > 0 and scale.first_block in r.ledger[0].new_block_ids
        assert (scale.bytes_out, scale.bytes_in, scale.copies_out) == (0, scale.bytes, 0)
    (copy,) = r.ledger
    scales = rows["k_scale"].bytes + rows["v_scale"].bytes
    assert copy.bytes_out == copy.expected_bytes - scales and copy.bytes_in == copy.expected_bytes
    assert scales == 2 * 4 * 8 * 16 * len(copy.block_ids) * copy.layers  # fp32 per (token, head), 8 heads, 2 sides


def test_skip_scales_on_a_hybrid_and_a_sliding_model_reds_every_attention_group_only() -> None:
    hybrid = run_vllm_roundtrip(HYBRID, ("--kv-cache-dtype", "fp8_per_token_head"), inject="skip-scales")
    assert set(hybrid.failing) == set(hybrid.expected_red) == {"g7.k_scale", "g7.v_scale", "g7.ledger"}
    assert all(row.ok for row in hybrid.rows if row.group != 7)  # the Mamba groups keep no scales: stored whole
    sliding = run_vllm_roundtrip(SLIDING, ("--kv-cache-dtype", "int8_per_token_head"), inject="skip-scales")
    groups = {row.group for row in sliding.rows}
    assert len(groups) == 6 and sliding.inject_matched is True
    assert set(sliding.failing) == {f"g{g}.{c}" for g in groups for c in ("k_scale", "v_scale", "ledger")}


@pytest.mark.parametrize(("model", "argv"), [(DENSE, ()), (DENSE, ("--kv-cache-dtype", "fp8")), (SLIDING, ())])
@pytest.mark.parametrize("layout", ["LBHNC", "LBNHC"])
def test_a_plain_page_is_split_per_cell_as_k_then_v(model: str, argv: tuple[str, ...], layout: str) -> None:
    """Every byte of a plain page labelled through the view vLLM's own FLASH_ATTN and TRITON_ATTN read it with
    (``kv_cache.transpose(1, 2).split(head_size, dim=-1)``, flash_attn.py:1257, triton_attn.py:828), in both
    head/slot orders: the round trip's ``k``/``v`` byte sets are exactly those (one run per (head, slot) cell, not
    the page's two halves)."""
    import torch

    from kvdoctor.engines.vllm.roundtrip import _components, _specs_and_groups

    _, groups, _ = _specs_and_groups(model, argv, 1)
    for group in groups:
        spec = group.kv_cache_spec
        heads, slots, blocks = spec.num_kv_heads, spec.block_size, 3
        raw = torch.zeros(blocks, spec.page_size_bytes, dtype=torch.uint8)
        typed = raw.view(spec.dtype)
        width = spec.head_size + spec.head_size_v
        if layout == "LBHNC":
            cache = typed.view(blocks, heads, slots, width)
        else:
            cache = typed.view(blocks, slots, heads, width).transpose(1, 2)
        key, value = cache.transpose(1, 2).split(spec.head_size, dim=-1)  # (B, H, N, 2*D) -> (B, N, H, D) twice
        key.view(torch.uint8).fill_(1)
        value.view(torch.uint8).fill_(2)
        parts = _components(spec)
        assert [n for n, _ in parts] == ["k", "v"]
        for name, part in parts:
            mask = torch.from_numpy(part.mask(spec.page_size_bytes))
            assert bool((raw[:, mask] == {"k": 1, "v": 2}[name]).all()) and int(mask.sum()) == part.size, name
        assert sum(p.size for _, p in parts) == spec.page_size_bytes and bool((raw != 0).all())


def test_an_mla_page_is_one_latent_whatever_its_quant_mode() -> None:
    """MLA is tested before the per-token-head split: no MLA backend lists those modes, and an MLA spec carrying one
    is still one latent run, never cut into K/V cells it does not have."""
    import torch
    from vllm.v1.kv_cache_interface import KVQuantMode, MLAAttentionSpec

    from kvdoctor.engines.vllm.roundtrip import _components

    spec = MLAAttentionSpec(
        block_size=16,
        num_kv_heads=1,
        head_size=576,
        dtype=torch.uint8,
        kv_quant_mode=KVQuantMode.FP8_PER_TOKEN_HEAD,
        cache_dtype_str="fp8_per_token_head",
    )
    parts = _components(spec)
    assert [n for n, _ in parts] == ["latent"] and parts[0][1].size == 16 * 576


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_copy_tally_is_the_byte_count_of_every_descriptor(seed: int) -> None:
    """_Moved's tally (coverage per (layer, block) from the descriptors' intervals, met with each byte set by its
    period) against a per-byte count: overlapping descriptors, descriptors spanning blocks, bytes never covered, and
    descriptors outside kvdoctor's tensors (the host's), for periodic byte sets, a single run and the whole page."""
    import random
    import types

    import numpy as np
    import torch

    from kvdoctor.engines.vllm.roundtrip import PageBytes, _Moved

    rng = random.Random(seed)
    page, blocks = 96, 5
    tensors = [torch.zeros(blocks, page, dtype=torch.int8) for _ in range(3)]
    host = torch.zeros(4 * page, dtype=torch.int8)
    calls, count = [], [np.zeros(blocks * page, dtype=np.int64) for _ in tensors]
    for _ in range(40):
        t = rng.randrange(len(tensors))
        at = rng.randrange(blocks * page - 1)
        size = rng.randint(1, min(2 * page, blocks * page - at))  # up to two pages: may span blocks
        count[t][at : at + size] += 1
        calls.append(types.SimpleNamespace(src=tensors[t].data_ptr() + at, dst=host.data_ptr(), size=size))
    stored = len(calls)
    calls += [types.SimpleNamespace(src=host.data_ptr(), dst=tensors[0].data_ptr() + page, size=page)]
    moved = _Moved(tensors, calls, stored)
    parts = [PageBytes(3, 10, 24, 4), PageBytes(13, 11, 24, 4), PageBytes(0, page), PageBytes(40, 7)]
    layers, chosen = [0, 2], [0, 2, 3, 4]
    got = moved.tally(moved.out, layers, chosen, page, parts)
    for part, (total, most) in zip(parts, got, strict=True):
        seen = np.concatenate([count[t].reshape(blocks, page)[b][part.mask(page)] for t in layers for b in chosen])
        assert (total, most) == (int(seen.sum()), 0 if seen.min() == 0 else int(seen.max())), part
    assert moved.bytes_out == {t: int(c.sum()) for t, c in enumerate(count) if c.sum()}
    assert moved.bytes_in == {0: page}
    ((into, once),) = moved.tally(moved.into, [0], [1], page, [PageBytes(0, page)])
    assert (into, once) == (page, 1)


def test_skip_scales_without_scales_is_exit_2() -> None:
    with pytest.raises(InputError, match="no group of this launch line carries in-page scales") as caught:
        run_vllm_roundtrip(DENSE, inject="skip-scales")
    assert caught.value.exit_code == EXIT_INPUT


@pytest.mark.parametrize("shim", ["tensor reports is_cuda", "memmove over vLLM's pointer lists", "no-op events"])
def test_a_shim_left_out_is_a_one_line_refusal(shim: str) -> None:
    with pytest.raises(InputError, match="CPUOffloadingWorker failed") as caught:
        run_vllm_roundtrip(DENSE, skip_shims=frozenset({shim}))
    assert caught.value.exit_code == EXIT_INPUT
    assert "\n" not in str(caught.value) and shim in str(caught.value)


def test_shims_are_undone_after_the_run() -> None:
    import torch
    from vllm.v1.kv_offload.cpu import gpu_worker

    before = (gpu_worker.ops.swap_blocks_batch, torch.Event, gpu_worker.PIN_MEMORY)
    run_vllm_roundtrip(DENSE)
    assert (gpu_worker.ops.swap_blocks_batch, torch.Event, gpu_worker.PIN_MEMORY) == before


def test_each_component_row_carries_the_bytes_vllms_descriptors_moved() -> None:
    """The per-component ledger is read from the descriptors vLLM wrote: a dropped group moved none of its bytes."""
    clean = run_vllm_roundtrip(HYBRID)
    assert all(r.bytes_out == r.bytes_in == r.bytes and (r.copies_out, r.copies_in) == (1, 1) for r in clean.rows)
    dropped = run_vllm_roundtrip(HYBRID, inject="drop-group")
    last = max(r.group for r in dropped.rows)
    for r in dropped.rows:
        assert (r.bytes_out == 0 and not r.ledger_ok) if r.group == last else r.ledger_ok


def test_a_packed_kv_page_is_compared_whole_not_split_as_k_then_v() -> None:
    """nvfp4 packs data and scales per head slot: a K/V split by head size would name the wrong bytes 'v'."""
    r = run_vllm_roundtrip(DENSE, ("--kv-cache-dtype", "nvfp4"))
    assert r.ok and [row.component for row in r.rows] == ["kv_packed"]
    assert r.rows[0].bytes == r.ledger[0].expected_bytes


def test_a_run_that_does_not_fit_in_memory_is_exit_2_before_allocating() -> None:
    with pytest.raises(InputError, match=r"would allocate .* GiB .* lower --tokens or --layers") as caught:
        run_vllm_roundtrip(DENSE, tokens=10**9, layers=None)
    assert caught.value.exit_code == EXIT_INPUT


def test_the_result_every_reporter_reads_has_a_row_per_group_component_then_its_ledger() -> None:
    from kvdoctor.core.engine_ref import EngineRef
    from kvdoctor.engines.vllm.roundtrip import roundtrip_result

    run = run_vllm_roundtrip(DENSE, inject="reorder-blocks")
    result = roundtrip_result(run, EngineRef("vllm", run.vllm_version), tokens=256, seed=0)
    assert [c.name for c in result.components] == ["g0.k", "g0.v", "g0.ledger"]
    assert result.failing == run.failing == ["g0.k", "g0.v"] and result.inject_matched is True
    assert result.used.groups[0].new_block_ids == run.ledger[0].new_block_ids
    assert result.exit_code == 1
