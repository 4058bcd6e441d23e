"""Rules checked against SGLang 0.5.23 after review: each case is the source's behaviour, restated."""

from __future__ import annotations

import json

import pytest

from kvdoctor._exceptions import ConfigError
from kvdoctor.core.config import load_config, parse_config
from kvdoctor.core.sglang.analysis import analyze_config
from kvdoctor.core.sglang.flags import parse_flags
from kvdoctor.core.sglang.policy import DEFAULT_PLATFORM, Platform
from tests.core.conftest import HOPPER, fixture_with, run

DECODE = ("--disaggregation-mode", "decode")


def _codes(a) -> set[str]:
    return {h.code.split("-", 1)[0] for h in a.hazards}


def _analyze(top: dict, *flags: str, platform: Platform = DEFAULT_PLATFORM):
    return analyze_config(parse_config(json.dumps(top), "test"), parse_flags(list(flags)), platform)


def test_host_receive_threshold_declares_host_pool_even_for_recurrent_state() -> None:
    a = run("inkling-small", *DECODE, "--disaggregation-decode-host-receive-threshold", "0.5")
    assert (a.backup.backend, a.backup.source, a.backup.explicit) == ("host_pool", "host-receive threshold", True)
    assert "KVD001" in _codes(a)
    assert run("inkling-small", *DECODE).backup.source == "inferred"


@pytest.mark.parametrize(
    ("flags", "ratio"),
    [
        (("--max-total-tokens", "65536"), 1.0),  # one 131,071-token request needs the whole pool
        (("--max-total-tokens", "65536", "--context-length", "8192"), 0.2),  # 8191/65536 < the floor
        (
            (
                "--max-total-tokens",
                "65536",
                "--context-length",
                "8192",
                "--disaggregation-decode-host-receive-threshold",
                "0.5",
            ),
            0.25,
        ),  # doubled: 16382/65536
        (("--max-total-tokens", "65536", "--hicache-size", "4"), 0.2),
    ],
)
def test_backup_only_hicache_ratio_fits_one_max_length_request(flags: tuple[str, ...], ratio: float) -> None:
    # On Hopper (page 1); on Blackwell trtllm_mha pages the request row by 64 tokens.
    assert run("llama-3.1-8b", *DECODE, *flags, platform=HOPPER).backup.hicache_ratio == pytest.approx(ratio, abs=1e-4)


def test_auto_kv_dtype_follows_sglangs_model_dtype() -> None:
    assert run("gemma-2-9b").spec.kv_dtype.payload == "bfloat16"  # float32 Gemma -> bfloat16
    top = dict(load_config("llama-3.1-8b").top)
    top["torch_dtype"] = "float32"
    assert _analyze(top).spec.kv_dtype.payload == "float16"
    del top["torch_dtype"]
    assert _analyze(top).spec.kv_dtype.payload == "float16"  # missing counts as float32
    assert _analyze(top, "--dtype", "bfloat16").spec.kv_dtype.payload == "bfloat16"


def test_fa4_forces_page_128_for_mha_but_not_mla() -> None:
    assert run("inkling-small", "--attention-backend", "fa4").flags.page_size == 128
    assert run("inkling-small", "--decode-attention-backend", "fa4", "--page-size", "64").flags.page_size == 128
    assert run("deepseek-v3", "--attention-backend", "fa4").flags.page_size == 1
    mxfp8 = ("--kv-cache-dtype", "mxfp8", *DECODE)
    assert "KVD006" not in _codes(run("inkling-small", *mxfp8, "--attention-backend", "fa4"))
    assert "KVD006" in _codes(run("inkling-small", *mxfp8, "--page-size", "64", platform=HOPPER))
    # On Blackwell Inkling's own default is fa4, which takes page 128 whatever the launch says.
    assert run("inkling-small", *mxfp8, "--page-size", "64").flags.page_size == 128
    assert run("inkling-small", "--page-size", "64", platform=HOPPER).flags.page_size == 64  # fa4 pages: SM100 only


def test_pd_transfer_without_block_scales_is_an_error() -> None:
    assert "KVD011" in _codes(run("qwen3-next-80b-a3b", *DECODE, "--kv-cache-dtype", "mxfp8", "--page-size", "128"))
    assert "KVD011" in _codes(run("llama-3.1-8b", "--disaggregation-mode", "prefill", "--kv-cache-dtype", "nvfp4"))
    assert "KVD011" not in _codes(run("inkling-small", *DECODE, "--kv-cache-dtype", "mxfp8", "--page-size", "128"))
    assert "KVD011" not in _codes(run("qwen3-next-80b-a3b", "--kv-cache-dtype", "mxfp8", "--page-size", "128"))


def test_swa_pool_that_cannot_hold_one_window_is_refused() -> None:
    assert "KVD012" in _codes(run("inkling-small", *DECODE, "--page-size", "128", "--max-total-tokens", "4096"))
    assert "KVD012" not in _codes(run("inkling-small", *DECODE, "--page-size", "128", "--max-total-tokens", "65536"))


def test_granite_spellings_and_default_pattern() -> None:
    kinds = load_config("granite-4.0-h-small").top["layer_types"]
    renamed = ["linear_attention" if k == "mamba" else "full_attention" for k in kinds]
    a = fixture_with("granite-4.0-h-small", layer_types=renamed)
    assert (a.classification.family, a.spec.recurrent.layers, a.spec.full.layers) == ("granite_hybrid", 36, 4)
    a = fixture_with("granite-4.0-h-small", layer_types=None)  # attention every 6th layer
    assert (a.spec.full.layer_ids, a.spec.recurrent.layers) == ((5, 11, 17, 23, 29, 35), 34)


def test_kimi_k3_keeps_its_kda_state_through_text_config() -> None:
    text = dict(load_config("kimi-linear-48b-a3b").top)
    top = {"model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"], "text_config": text}
    a = _analyze(top)
    assert a.classification.family == "kda" and a.spec.recurrent is not None
    assert a.spec.recurrent.layers == run("kimi-linear-48b-a3b").spec.recurrent.layers


@pytest.mark.parametrize(
    ("model", "conv_width"),
    [
        ("mamba2-2.7b", (5120 + 2 * 2 * 128) // 2),
        ("falcon-h1-1.5b", (3072 + 2 * 2 * 256) // 2),
        ("granite-4.0-h-small", (8192 + 2 * 2 * 128) // 2),
    ],
)
def test_mamba2_groups_are_padded_to_the_tp_shards(model: str, conv_width: int) -> None:
    assert run(model, "--tp", "2").spec.recurrent.conv_shapes[0][0] == conv_width


def test_minicpm_mixer_types_are_tiled_over_the_layers() -> None:
    a = fixture_with("minicpm-sala", mixer_types=["lightning", "lightning", "minicpm4"])
    assert a.spec.recurrent.layers == 22 and a.spec.full.layers == 10  # 32 layers, pattern of 3 tiled


def test_swa_layer_rules_beyond_layer_types() -> None:
    base = dict(load_config("gpt-oss-20b").top)
    ocr = _analyze({**base, "architectures": ["UnlimitedOCRForCausalLM"]})
    assert ocr.spec.full is None and ocr.spec.swa.layers == 24
    step = _analyze(
        {
            **base,
            "architectures": ["Step3p5ForCausalLM"],
            "num_hidden_layers": 4,
            "layer_types": ["sliding_attention", "full_attention"] * 3,
        }
    )
    assert (step.spec.full.layer_ids, step.spec.swa.layer_ids) == ((1, 3), (0, 2))
    pattern = _analyze(
        {**base, "architectures": ["LlamaForCausalLM"], "is_hybrid_swa": True, "hybrid_layer_pattern": [1, 1, 1, 0] * 6}
    )
    assert (pattern.spec.full.layers, pattern.spec.swa.layers) == (6, 18)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"head_dim": "x"}, "field 'head_dim' must be a whole number"),
        ({"architectures": "LlamaForCausalLM"}, "must be a list of class names"),
        ({"architectures": ["GptOssForCausalLM"], "layer_types": "sliding"}, "layer_types"),
        ({"architectures": ["GptOssForCausalLM"], "layer_types": []}, "has 0 entries for 32 layers"),
    ],
)
def test_malformed_fields_are_config_errors_not_tracebacks(change: dict, message: str) -> None:
    top = {**load_config("llama-3.1-8b").top, **change}
    with pytest.raises(ConfigError, match=message):
        _analyze(top)


def test_malformed_recurrent_fields_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        fixture_with("inkling-small", local_layer_ids=["a"])
    with pytest.raises(ConfigError):
        fixture_with("ring-mini-linear-2.0", layer_group_size=0)
    with pytest.raises(ConfigError, match="num_heads and head_dim"):
        fixture_with("kimi-linear-48b-a3b", linear_attn_config={"kda_layers": [1]})


def test_all_swa_models_need_page_size_one() -> None:
    top = {**load_config("gpt-oss-20b").top, "layer_types": ["sliding_attention"] * 24}
    assert "KVD013" in _codes(_analyze(top, "--page-size", "64"))
    assert "KVD013" not in _codes(_analyze(top, platform=HOPPER))
    assert "KVD013" in _codes(_analyze(top))  # Blackwell: GPT-OSS runs trtllm_mha, which takes page 64
    assert "KVD013" not in _codes(run("gpt-oss-20b", "--page-size", "64"))
