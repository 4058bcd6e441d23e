"""The retraction backup decision: every host_pool condition flipped on its own moves the verdict."""

from __future__ import annotations

import json

import pytest

from kvdoctor.core.config import load_config, parse_config
from kvdoctor.core.sglang.analysis import analyze_config
from kvdoctor.core.sglang.flags import parse_flags
from kvdoctor.core.sglang.policy import Platform, decide_backup
from tests.core.conftest import run

DECODE = ("--disaggregation-mode", "decode")


CUDA = Platform()


def _decide(model: str, *flags: str, platform: Platform = CUDA):
    a = run(model, *flags)
    return decide_backup(a.spec, a.layout, a.flags, platform)


def test_baseline_plain_mha_decode_gets_host_pool_with_every_condition_true() -> None:
    decision = _decide("llama-3.1-8b", *DECODE)
    assert decision.backend == "host_pool" and decision.applies and not decision.explicit
    assert all(c.passed for c in decision.conditions)
    assert len(decision.conditions) == 10


FLIPS = [
    ("decode_server", ("--disaggregation-mode", "prefill"), Platform()),
    ("not_hip", DECODE, Platform(hip=True)),
    ("no_dcp", (*DECODE, "--dcp-size", "2"), Platform()),
    ("no_decode_radix_cache", (*DECODE, "--disaggregation-decode-enable-radix-cache"), Platform()),
    ("no_decode_offload", (*DECODE, "--disaggregation-decode-enable-offload-kvcache"), Platform()),
    ("no_priority_preemption", (*DECODE, "--enable-priority-scheduling"), Platform()),
    ("unified_draft_ok", (*DECODE, "--enable-unified-memory"), Platform(mtp_draft_pools=True)),
]


@pytest.mark.parametrize(("condition", "flags", "platform"), FLIPS, ids=[f[0] for f in FLIPS])
def test_flipping_one_condition_falls_back_to_cpu_tensor(condition: str, flags, platform: Platform) -> None:
    decision = _decide("llama-3.1-8b", *flags, platform=platform)
    failed = [c.name for c in decision.conditions if not c.passed]
    assert failed == [condition]
    assert decision.backend == "cpu_tensor"


def test_priority_preemption_needs_both_flags() -> None:
    decision = _decide("llama-3.1-8b", *DECODE, "--enable-priority-scheduling", "--disable-priority-preemption")
    assert decision.backend == "host_pool"


def test_dspark_keeps_host_pool_with_unified_draft_pools() -> None:
    platform = Platform(mtp_draft_pools=True, dspark_speculation=True)
    assert _decide("llama-3.1-8b", *DECODE, "--enable-unified-memory", platform=platform).backend == "host_pool"


def test_recurrent_state_alone_forces_cpu_tensor() -> None:
    # Inkling is an SWAKVPool with full layers, so the layout condition holds; only SSM fails.
    decision = _decide("inkling-small", *DECODE)
    assert [c.name for c in decision.conditions if not c.passed] == ["no_recurrent_state"]
    assert decision.backend == "cpu_tensor"


def test_unified_memory_on_a_hybrid_swa_model() -> None:
    assert _decide("gpt-oss-20b", *DECODE).backend == "host_pool"
    decision = _decide("gpt-oss-20b", *DECODE, "--enable-unified-memory")
    assert [c.name for c in decision.conditions if not c.passed] == ["no_unified_hybrid_swa"]


def test_swa_pool_without_full_layers_cannot_use_host_pool() -> None:
    top = dict(load_config("gpt-oss-20b").top)
    top["layer_types"] = ["sliding_attention"] * top["num_hidden_layers"]
    a = analyze_config(parse_config(json.dumps(top), "all-swa"), parse_flags(list(DECODE)))
    assert [c.name for c in a.backup.conditions if not c.passed] == ["host_pool_kv_layout"]
    assert a.backup.backend == "cpu_tensor"


def test_mla_pool_is_not_a_host_pool_layout() -> None:
    decision = _decide("deepseek-v3", *DECODE)
    assert [c.name for c in decision.conditions if not c.passed] == ["host_pool_kv_layout"]


def test_explicit_flag_is_used_unchanged() -> None:
    decision = _decide("inkling-small", *DECODE, "--disaggregation-decode-retraction-backup", "host_pool")
    assert decision.backend == "host_pool" and decision.explicit


@pytest.mark.parametrize(
    ("model", "flags", "ratio"),
    [
        ("llama-3.1-8b", DECODE, 0.2),  # backup-only host pool
        ("llama-3.1-8b", (*DECODE, "--enable-hierarchical-cache"), 2.0),
        ("inkling-small", DECODE, 2.0),  # cpu_tensor
        ("llama-3.1-8b", (*DECODE, "--hicache-ratio", "1.5"), 1.5),
        ("llama-3.1-8b", (), 2.0),  # other servers resolve an unset ratio at start-up (hicache_hook.py:119-122)
        ("llama-3.1-8b", ("--hicache-host-memory-mode", "buffer_only", "--hicache-storage-backend", "file"), 1.2),
    ],
)
def test_hicache_ratio_resolution(model: str, flags: tuple[str, ...], ratio: float | None) -> None:
    assert _decide(model, *flags).hicache_ratio == ratio


def test_pool_layout_and_mamba_contract() -> None:
    ink = run("inkling-small").layout
    assert (ink.kv_pool, ink.cpu_copy_carries_mamba, ink.caller_backs_up_mamba) == ("SWAKVPool", False, True)
    gdn = run("qwen3-next-80b-a3b").layout
    assert (gdn.kv_pool, gdn.cpu_copy_carries_mamba, gdn.caller_backs_up_mamba) == ("HybridLinearKVPool", True, False)
    llama = run("llama-3.1-8b", "--kv-cache-dtype", "mxfp8").layout
    assert (llama.kv_pool, llama.req_to_token_pool) == ("MHATokenToKVPoolMXFP8", "ReqToTokenPool")


@pytest.mark.parametrize(
    ("model", "dtype", "types"),
    [
        # SGLang's registration order: SWA, each MXFP8 sub-pool's scales, the request pool's MAMBA last.
        ("inkling-small", "mxfp8", ("SWA", "BLOCK_SCALE", "BLOCK_SCALE_SWA", "MAMBA")),
        ("inkling-small", "bf16", ("SWA", "MAMBA")),
        ("llama-3.1-8b", "mxfp8", ("BLOCK_SCALE",)),
        ("llama-3.1-8b", "nvfp4", ()),  # FP4 scales live in the plain MHA pool: never registered
        ("qwen3-next-80b-a3b", "auto", ("MAMBA",)),
        ("qwen3-next-80b-a3b", "mxfp8", ("MAMBA",)),  # a HybridLinearKVPool registers MAMBA alone
        ("deepseek-v3", "fp8_e4m3", ()),
    ],
)
def test_pd_state_types(model: str, dtype: str, types: tuple[str, ...]) -> None:
    assert run(model, "--kv-cache-dtype", dtype).pd_state_types == types
