"""Issue 9: the rule model corrected against what SGLang 0.5.23 was measured to do.

Each test restates one measured behaviour (the SGLang file and lines are in ``kvdoctor/core/sglang/rules.py``)
and checks the rule model gives the same answer on a bundled fixture shaped like the real config.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvdoctor._exceptions import ConfigError
from kvdoctor.core.config import load_config, parse_config
from kvdoctor.core.sglang import rules
from kvdoctor.core.sglang.analysis import Analysis, analyze, analyze_config
from kvdoctor.core.sglang.flags import parse_flags
from kvdoctor.core.sglang.inspect_result import inspect_report
from kvdoctor.core.sglang.policy import Platform

DECODE = ("--disaggregation-mode", "decode")
HOST_POOL = (*DECODE, "--disaggregation-decode-retraction-backup", "host_pool")


def _with(
    name: str, *flags: str, drop: tuple[str, ...] = (), top: dict[str, Any] | None = None, **text: Any
) -> Analysis:
    """Fixture NAME with text-config fields changed (or dropped) and top-level fields set, under FLAGS."""
    data = json.loads(json.dumps(load_config(name).top))
    target = data.get("text_config", data)
    target.update(text)
    for key in drop:
        target.pop(key, None)
    data.update(top or {})
    return analyze_config(parse_config(json.dumps(data), f"{name}+changes"), parse_flags(list(flags)))


def _refusals(a: Analysis) -> set[str]:
    return {r.key for r in a.refusals}


def _kvd014(a: Analysis) -> list[str]:
    return [h.message for h in a.hazards if h.code == "KVD014-SGLANG-REFUSES"]


# --- Hybrid families that used to read as dense ---


@pytest.mark.parametrize(
    ("fixture", "full", "linear", "conv", "temporal"),
    [
        ("qwen4-exp", 6, 18, ((8192, 3),), (32, 128, 128)),  # text config subclasses Qwen3NextConfig
        ("interns2-mobius", 12, 36, ((8192, 3),), (32, 128, 128)),  # text config subclasses Qwen3.5-MoE's
        ("bailing-moe-v3-vl", 5, 15, ((3, 6144),), (16, 128, 128)),  # text_config is a KDA BailingHybridConfig
    ],
)
def test_hybrid_text_configs_are_recurrent(fixture: str, full: int, linear: int, conv: tuple, temporal: tuple) -> None:
    a = analyze(fixture, list(DECODE))
    assert a.classification.uses_ssm_state and a.layout.kv_pool == "HybridLinearKVPool"
    assert (a.spec.full.layers, a.spec.recurrent.layers) == (full, linear)
    assert (a.spec.recurrent.conv_shapes, a.spec.recurrent.temporal_shape) == (conv, temporal)
    assert a.backup.backend == "cpu_tensor" and a.pd_state_types == ("MAMBA",)
    assert a.layout.req_to_token_pool == "HybridMambaDecodeReqToTokenPool" and a.layout.cpu_copy_carries_mamba


def test_bailing_v3_vl_is_mla_and_without_kda_not_recurrent() -> None:
    a = analyze("bailing-moe-v3-vl")
    assert a.classification.predicate == "kimi_linear_config" and a.layout.full_pool == "MLATokenToKVPool"
    # hybrid_lightning_config tests the top-level config, which is not a BailingHybridConfig here.
    plain = _with("bailing-moe-v3-vl", drop=("short_conv_kernel_size",))
    assert not plain.classification.uses_ssm_state and plain.layout.kv_pool == "MLATokenToKVPool"


# --- DeepSeek-V3.2 (DSA) and DeepSeek-V4 ---


def test_dsa_builds_its_own_pool_at_page_64_with_the_dsa_state() -> None:
    a = analyze("deepseek-v3.2", ["--page-size", "1"])  # the model override wins over the flag
    assert (a.classification.family, a.layout.kv_pool, a.flags.page_size) == ("dsa", "DSATokenToKVPool", 64)
    assert a.pd_state_types == ("DSA",)
    index = a.spec.component("dsa_index_k")
    assert index is not None and index.bytes == 61 * (128 + 4)  # fp8 key + one float32 scale per layer
    assert analyze("deepseek-v3.2", list(DECODE)).backup.backend == "cpu_tensor"  # not an MHA pool
    pooled = _with("deepseek-v3.2", index_kpool=2, index_kpool_compress=True)
    assert pooled.flags.page_size == 128 and pooled.pd_state_types == ("DSA", "DSA_TAIL")
    assert _with("deepseek-v3.2", drop=("index_topk",)).layout.kv_pool == "MLATokenToKVPool"  # no indexer


def test_deepseek_v4_builds_its_own_pool_not_an_swa_pool() -> None:
    a = analyze("deepseek-v4", list(DECODE))
    assert (a.layout.kv_pool, a.layout.swa_pool) == ("DeepSeekV4TokenToKVPool", "DeepSeekV4SingleKVPool")
    assert a.flags.page_size == 256 and a.sizing.swa_full_tokens_ratio == 0.1
    assert a.spec.kv_dtype.flag == "fp8_e4m3"  # auto resolves to fp8 for V4
    assert a.pd_state_types == ("SWA", "DSV4_REQUEST_STATE")
    assert a.backup.backend == "cpu_tensor"
    assert not next(c for c in a.backup.conditions if c.name == "host_pool_kv_layout").passed
    explicit = analyze("deepseek-v4", ["--swa-full-tokens-ratio", "0.5", "--page-size", "64"])
    assert explicit.sizing.swa_full_tokens_ratio == 0.5 and explicit.flags.page_size == 256


@pytest.mark.parametrize(("fixture", "key"), [("deepseek-v3.2", "dsa_kv_dtype"), ("deepseek-v4", "dsv4_kv_dtype")])
def test_mxfp8_with_fa4_is_refused_for_the_deepseek_sparse_families(fixture: str, key: str) -> None:
    a = analyze(fixture, ["--kv-cache-dtype", "mxfp8", "--attention-backend", "fa4"])
    assert key in _refusals(a) and a.spec.components  # KVD014, with the analysis still there
    assert "overrides.py" in next(r.where for r in a.refusals if r.key == key)


# --- GigaChat-3.5, Step-3.5, Gemma 4, Beam, MiniCPM-SALA ---


def test_gigachat_reads_full_attention_layers_then_layer_types_else_all_linear() -> None:
    a = analyze("gigachat-3.5")
    assert a.spec.full.mla and a.spec.full.layer_ids == (3, 7, 11, 15, 19, 23, 25) and a.spec.recurrent.layers == 19
    kinds = ["attention" if i in (0, 1) else "linear_attention" for i in range(26)]
    assert _with("gigachat-3.5", layer_types=kinds).spec.full.layer_ids == (0, 1)
    linear = _with("gigachat-3.5", drop=("full_attention_layers",))
    assert linear.spec.full is None and linear.spec.recurrent.layers == 26
    with pytest.raises(ConfigError, match="full_attention_layers"):
        _with("gigachat-3.5", full_attention_layers=[99])


def test_step35_kv_heads_and_hicache_with_the_decode_radix_cache() -> None:
    a = analyze("step-3.5")
    assert a.spec.full.kv_heads == 8 and (a.spec.full.layers, a.spec.swa.layers) == (12, 33)  # MTP entries dropped
    hicache = analyze(
        "step-3.5",
        [
            *DECODE,
            "--enable-hierarchical-cache",
            "--disaggregation-decode-enable-radix-cache",
            "--swa-full-tokens-ratio",
            "0.5",
        ],
    )
    assert not hicache.classification.is_hybrid_swa and hicache.layout.kv_pool == "MHATokenToKVPool"
    assert hicache.sizing.swa_full_tokens_ratio == 1.0 and not hicache.refusals


def test_gemma4_full_attention_layers_use_global_head_dim() -> None:
    a = analyze("gemma-4")
    assert (a.spec.full.head_dim, a.spec.full.kv_heads, a.spec.full.layers) == (512, 2, 5)
    assert (a.spec.swa.head_dim, a.spec.swa.kv_heads, a.spec.swa.layers) == (256, 8, 25)
    default = _with("gemma-4", drop=("global_head_dim",), attention_k_eq_v=False)
    assert (default.spec.full.head_dim, default.spec.full.kv_heads) == (512, 8)
    last_sliding = ["sliding_attention"] * 30
    assert _with("gemma-4", layer_types=last_sliding).spec.full.layer_ids == (29,)  # forced to full


@pytest.mark.parametrize(
    ("flags", "page"),
    [((), 64), (("--page-size", "32"), 32), (("--page-size", "8"), 64), (("--attention-backend", "fa3"), 1)],
)
def test_beam_runs_trtllm_mha_pages(flags: tuple[str, ...], page: int) -> None:
    assert analyze("beam", list(flags)).flags.page_size == page


def test_minicpm_sala_runs_without_the_radix_cache() -> None:
    assert analyze("minicpm-sala").sizing.mamba_slots_per_request == 1
    refused = analyze("minicpm-sala", ["--enable-hierarchical-cache"])
    assert _refusals(refused) == {"minicpm_hicache"}


# --- dtype, MXFP8 PD scales, hicache ratio, mamba slots ---


def test_model_dtype_is_the_text_configs_inheriting_the_top_level() -> None:
    assert analyze("qwen4-exp").spec.kv_dtype.payload == "bfloat16"  # dtype only at the top level
    own = _with("qwen3.5-moe", top={"dtype": "bfloat16"}, torch_dtype="float32")
    assert own.spec.kv_dtype.payload == "float16"  # the text config's own float32 wins, served as float16
    for fixture in ("interns2-mobius", "gigachat-3.5", "longcat-flash"):  # their config classes default bf16
        bare = json.loads(json.dumps(load_config(fixture).top))
        for mapping in (bare, bare.get("text_config", {})):
            mapping.pop("dtype", None), mapping.pop("torch_dtype", None)
        a = analyze_config(parse_config(json.dumps(bare), fixture), parse_flags([]))
        assert a.spec.kv_dtype.payload == "bfloat16", fixture


def test_mxfp8_on_hybrid_swa_registers_scales_for_both_sub_pools() -> None:
    flags = ("--kv-cache-dtype", "mxfp8", "--page-size", "128", *DECODE)
    all_sliding = _with("gpt-oss-20b", *flags, layer_types=["sliding_attention"] * 24)
    assert all_sliding.spec.full is None and all_sliding.layout.full_pool == "MHATokenToKVPoolMXFP8"
    assert all_sliding.pd_state_types == ("SWA", "BLOCK_SCALE", "BLOCK_SCALE_SWA")


@pytest.mark.parametrize(
    ("flags", "ratio"),
    [
        (("--max-total-tokens", "65536", "--context-length", "32768"), 32771 / 65536),  # context + 3
        (("--max-total-tokens", "65536", "--context-length", "32768", "--page-size", "64"), 32832 / 65536),
    ],
)
def test_backup_only_hicache_ratio_uses_the_request_row_length(flags: tuple[str, ...], ratio: float) -> None:
    hopper = Platform(gpu_arch="sm90")  # page 1 unless the launch says otherwise
    ratio_of = analyze("llama-3.1-8b", [*DECODE, *flags], platform=hopper).backup.hicache_ratio
    assert ratio_of == pytest.approx(ratio, abs=1e-12)


@pytest.mark.parametrize(
    ("flags", "slots"), [(("--attn-dp-size", "4"), 16), (("--dp-size", "2", "--enable-dp-attention"), 32), ((), 64)]
)
def test_max_mamba_cache_size_is_per_attention_dp_shard(flags: tuple[str, ...], slots: int) -> None:
    a = analyze("qwen3-next-80b-a3b", ["--max-mamba-cache-size", "64", "--tp-size", "4", *flags])
    assert a.sizing.mamba_slots == slots


def test_inkling_always_uses_the_extra_buffer() -> None:
    assert analyze("inkling-small", ["--disable-overlap-schedule"]).sizing.mamba_slots_per_request == 4
    assert analyze("inkling-small", ["--mamba-radix-cache-strategy", "no_buffer"]).sizing.mamba_slots_per_request == 3


# --- Refusals kvdoctor used to pass, and the threshold that wins over an explicit none ---


@pytest.mark.parametrize(
    ("model", "flags", "key"),
    [
        ("llama-3.1-8b", (*DECODE, "--disaggregation-decode-enable-offload-kvcache"), "offload_no_storage"),
        (
            "llama-3.1-8b",
            (*HOST_POOL, "--disaggregation-decode-enable-offload-kvcache", "--hicache-storage-backend", "file"),
            "offload_host_pool",
        ),
        ("llama-3.1-8b", (*DECODE, "--enable-hierarchical-cache"), "hicache_without_radix"),
        ("llama-3.1-8b", ("--context-length", "200000"), "context_length"),
        ("llama-3.1-8b", ("--tp-size", "3"), "tp_kv_heads"),
        ("qwen3-next-80b-a3b", HOST_POOL, "host_pool_mamba"),
        ("deepseek-v3", HOST_POOL, "host_pool_layout"),
        ("lfm2-1.2b", ("--page-size", "16"), "mamba_no_buffer_paged"),  # auto resolves to no_buffer on LFM2
        ("lfm2-1.2b", ("--mamba-radix-cache-strategy", "extra_buffer"), "mamba_extra_buffer_arch"),
    ],
)
def test_launches_sglang_refuses_are_kvd014_with_its_message_and_place(
    model: str, flags: tuple[str, ...], key: str
) -> None:
    a = analyze(model, list(flags))
    assert key in _refusals(a)
    rule = rules.REFUSALS[key]
    hazard = next(h for h in a.hazards if h.code == "KVD014-SGLANG-REFUSES" and h.where == rule.source.where)
    assert rule.message.split("{")[0] in hazard.message and f"sglang/{rule.source.path}:" in hazard.message
    assert a.worst_severity == "error" and a.spec.components  # --strict fails; the analysis is still shown
    report = inspect_report(a, 2048, 8)
    assert any(r.where == rule.source.where for r in report.refusals)


def test_launches_sglang_accepts_are_not_refused() -> None:
    assert not analyze("llama-3.1-8b", ["--context-length", "131072"]).refusals
    assert not analyze(
        "llama-3.1-8b", [*DECODE, "--enable-hierarchical-cache", "--disaggregation-decode-enable-radix-cache"]
    ).refusals
    assert not analyze(
        "llama-3.1-8b", [*DECODE, "--disaggregation-decode-enable-offload-kvcache", "--hicache-storage-backend", "file"]
    ).refusals
    assert not analyze("llama-3.1-8b", ["--tp-size", "8"]).refusals  # KV heads replicated
    # the Mamba radix-cache strategy is validated only where the radix cache is on, and extra_buffer where supported
    assert not analyze("lfm2-1.2b", ["--page-size", "16", "--disable-radix-cache"]).refusals
    assert not analyze("lfm2-1.2b", [*DECODE, "--page-size", "16"]).refusals  # a decode without its radix opt-in
    assert not analyze("qwen3-next-80b-a3b", ["--page-size", "16"]).refusals  # auto resolves to extra_buffer
    assert not analyze("llama-3.1-8b", ["--page-size", "16"]).refusals  # no recurrent state


def test_pure_swa_host_pool_is_refused() -> None:
    a = _with("gpt-oss-20b", *HOST_POOL, layer_types=["sliding_attention"] * 24)
    assert "host_pool_pure_swa" in _refusals(a)


def test_host_receive_threshold_wins_over_an_explicit_none() -> None:
    a = analyze(
        "llama-3.1-8b",
        [
            *DECODE,
            "--disaggregation-decode-host-receive-threshold",
            "0.5",
            "--disaggregation-decode-retraction-backup",
            "none",
        ],
    )
    assert (a.backup.backend, a.backup.source) == ("host_pool", "host-receive threshold")
    assert "KVD003" not in {h.code.split("-")[0] for h in a.hazards}


def test_kvd001_says_sglang_refuses_and_what_a_server_without_the_check_does() -> None:
    a = analyze("inkling-small", list(HOST_POOL))
    kvd001 = next(h.message for h in a.hazards if h.code == "KVD001-SSM-ON-HOST-POOL")
    assert "refuses this launch at start-up" in kvd001 and "sglang/srt/mem_cache/registry.py:156-158" in kvd001
    assert "without that check" in kvd001
    assert any("Host-pool retraction does not support Mamba models." in m for m in _kvd014(a))


# --- Configs SGLang cannot build pools for: exit 2, naming the field ---


@pytest.mark.parametrize(
    ("fixture", "drop", "changes", "field"),
    [
        ("qwen3.5-moe", ("full_attention_interval",), {}, "full_attention_interval"),
        ("mamba2-2.7b", ("intermediate_size",), {}, "intermediate_size"),
        ("lfm2-1.2b", (), {"layer_types": ["full_attention"] * 16}, "layer_types"),
    ],
)
def test_configs_sglang_cannot_build_pools_for_are_input_errors(
    fixture: str, drop: tuple[str, ...], changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError, match=f"field '[a-z_.]*{field}'.*SGLang cannot build"):
        _with(fixture, drop=drop, **changes)


# --- Model types SGLang serves that kvdoctor used to refuse ---


@pytest.mark.parametrize(("fixture", "kv_heads", "layers"), [("seed-oss-36b", 8, 64), ("smollm3-3b", 4, 36)])
def test_transformers_backend_models_are_served(fixture: str, kv_heads: int, layers: int) -> None:
    a = analyze(fixture)
    assert a.classification.transformers_backend and a.layout.kv_pool == "MHATokenToKVPool"
    assert (a.spec.full.kv_heads, a.spec.full.layers) == (kv_heads, layers)
    assert "registry.py" in a.classification.source


def test_longcat_flash_counts_num_layers_with_two_attention_blocks_each() -> None:
    a = analyze("longcat-flash")
    assert a.spec.num_layers == 28 and a.spec.full.layers == 56 and a.layout.kv_pool == "MLATokenToKVPool"


def test_nemotron_h_layers_block_type_schema() -> None:
    a = analyze("nemotron-h-8b-lbt")
    old = analyze("nemotron-h-8b")
    assert a.spec.num_layers == 56 and (a.spec.full.layer_ids, a.spec.recurrent.layer_ids) == (
        old.spec.full.layer_ids,
        old.spec.recurrent.layer_ids,
    )
    with pytest.raises(ConfigError, match="unknown layer kind"):
        _with("nemotron-h-8b-lbt", layers_block_type=["mamba", "hyena"] * 28)


def test_deepseek_v4_without_hybrid_swa_does_not_start() -> None:
    """SGLang 0.5.23 builds DeepSeek-V4's pool with no full/SWA size when hybrid SWA is off (found by drift)."""
    off = analyze("deepseek-v4", ["--disaggregation-mode", "decode", "--disable-hybrid-swa-memory"])
    assert [r.key for r in off.refusals] == ["dsv4_no_hybrid_swa"]
    assert not analyze("deepseek-v4", ["--disaggregation-mode", "decode"]).refusals
