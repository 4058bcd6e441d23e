"""The public bugs ``roundtrip --server vllm --engine vllm`` replays on vLLM 0.33's own CPUOffloadingWorker:
``null-source`` (vllm#53084: the store reads the null block for a Mamba group) and ``mis-stride`` (kvcached#424: the
load places each page of a per-token-head KV cache at the stride without its inline scales). Each turns exactly its
group's rows red, naming the component; the same round trip without the fault is green; a model the fault cannot
change is refused (exit 2).

Runs in .venv-vllm/ (``make test-vllm``); every ``vllm.*`` object here is the installed wheel's.
"""

from __future__ import annotations

import pytest

from kvdoctor._exceptions import EXIT_INPUT, InputError
from kvdoctor.core import faults
from kvdoctor.engines.vllm.roundtrip import VllmRoundtrip, run_vllm_roundtrip

pytestmark = pytest.mark.vllm

DENSE, NEMOTRON, GRANITE = "llama-3.1-8b", "nemotron-h-8b", "granite-4.0-h-small"
TOKEN_HEAD = ("fp8_per_token_head", "int8_per_token_head", "int4_per_token_head")


def _groups(r: VllmRoundtrip, spec: str) -> set[int]:
    return {c.group for c in r.ledger if c.spec == spec}


def test_each_replay_fault_names_its_bug_in_the_registry() -> None:
    replays = {f.name: f.replays for f in faults.select(server="vllm", target="engine-roundtrip")}
    assert (replays["null-source"], replays["mis-stride"]) == (("vllm#53084",), ("kvcached#424",))


@pytest.mark.parametrize("seed", range(4))
def test_no_request_block_is_vllm_s_null_block(seed: int) -> None:
    """vLLM's BlockPool keeps block 0 as the null block and never hands it out: were it one of the request's blocks,
    null-source would read the request's own state and pass green."""
    r = run_vllm_roundtrip(DENSE, seed=seed)
    assert r.ok and all(0 not in c.block_ids + c.new_block_ids for c in r.ledger)


@pytest.mark.parametrize("model", [NEMOTRON, GRANITE])
def test_null_source_turns_every_mamba_state_red_with_the_ledger_green(model: str) -> None:
    """Every byte moves out and back (each group's ledger green), but the stored Mamba state is the null block's:
    conv_state and ssm_state of every Mamba group are red, read from no byte of the request's own block."""
    clean = run_vllm_roundtrip(model)
    assert clean.ok and clean.failing == []
    r = run_vllm_roundtrip(model, inject="null-source")
    mamba = _groups(r, "MambaSpec")
    assert mamba and r.inject_matched is True
    assert set(r.failing) == set(r.expected_red) == {row.name for row in r.rows if row.group in mamba}
    assert {"conv_state", "ssm_state"} <= {row.component for row in r.rows if row.name in r.failing}
    assert all(c.ledger_ok and c.bytes_out == c.bytes_in == c.expected_bytes for c in r.ledger)
    for row in (x for x in r.rows if x.group in mamba):
        assert row.mismatched_bytes > 0 and row.bytes_in == row.bytes and row.copies_out == 0
    assert all(row.ok for row in r.rows if row.group not in mamba)  # the attention group moved its own blocks


def test_null_source_on_a_model_without_mamba_state_is_exit_2() -> None:
    with pytest.raises(InputError, match=r"^--inject null-source: no KV-cache group .* holds Mamba state") as exc:
        run_vllm_roundtrip(DENSE, inject="null-source")
    assert exc.value.exit_code == EXIT_INPUT


@pytest.mark.parametrize("mode", TOKEN_HEAD)
def test_mis_stride_turns_every_component_of_the_scaled_group_red(mode: str) -> None:
    """Each page lands at block x (page - scale bytes): k, v and their scales all read wrong, though the load wrote
    exactly a page per block (the group's ledger green)."""
    argv = ("--kv-cache-dtype", mode)
    assert run_vllm_roundtrip(DENSE, argv).ok
    r = run_vllm_roundtrip(DENSE, argv, inject="mis-stride")
    assert set(r.failing) == set(r.expected_red) == {"g0.k", "g0.k_scale", "g0.v", "g0.v_scale"}
    assert r.inject_matched is True and all(c.ledger_ok for c in r.ledger)
    rows = {row.component: row for row in r.rows}
    assert all(row.mismatched_bytes > 0 and row.bytes_out == row.bytes for row in rows.values())


def test_mis_stride_on_a_hybrid_reds_the_attention_group_only() -> None:
    r = run_vllm_roundtrip(NEMOTRON, ("--kv-cache-dtype", "int8_per_token_head"), inject="mis-stride")
    (attention,) = _groups(r, "FullAttentionSpec")
    assert set(r.failing) == {f"g{attention}.{c}" for c in ("k", "k_scale", "v", "v_scale")}
    assert r.inject_matched is True and all(row.ok for row in r.rows if row.group != attention)


def test_mis_stride_without_in_page_scales_is_exit_2() -> None:
    """vLLM 0.33's plain fp8 is per-tensor: its pages keep no scale, so the widened and bare strides agree."""
    with pytest.raises(InputError, match=r"^--inject mis-stride: no group of this launch line carries in-page") as exc:
        run_vllm_roundtrip(DENSE, ("--kv-cache-dtype", "fp8"), inject="mis-stride")
    assert exc.value.exit_code == EXIT_INPUT
