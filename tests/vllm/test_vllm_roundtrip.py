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
