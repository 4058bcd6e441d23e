"""Bytes and shapes of the state spec, checked against worked examples and SGLang's formulas."""

from __future__ import annotations

import pytest

from tests.core.conftest import fixture_with, run


def test_inkling_conv_state_matches_the_worked_example() -> None:
    # 16 layers x 6 convs of (K-1=3, d): 3*(2*512 + 2*512 + 2*1536) = 15,360 bf16 elements per layer.
    spec = run("inkling-small").spec
    assert spec.component("conv_state").bytes == 491_520
    assert spec.component("temporal_state") is None  # Inkling's temporal shape is (0, 0, 0)
    assert run("inkling-small", "--tp", "2").spec.component("conv_state").bytes == 393_216


def test_inkling_mxfp8_carries_full_swa_conv_and_both_scale_planes() -> None:
    spec = run("inkling-small", "--kv-cache-dtype", "mxfp8").spec
    assert set(spec.names) == {"full_kv", "full_kv_scales", "swa_kv", "swa_kv_scales", "conv_state"}
    assert (spec.full.layers, spec.swa.layers) == (4, 12)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "gpt-oss-20b", "inkling-small", "qwen3-next-80b-a3b"])
def test_mxfp8_scale_bytes_follow_sglangs_per_token_formula(model: str) -> None:
    # n_kv_heads * (head_dim + v_head_dim) * num_layers / 32 per sub-pool.
    spec = run(model, "--kv-cache-dtype", "mxfp8").spec
    for sub, geo in (("full", spec.full), ("swa", spec.swa)):
        if geo is None:
            continue
        expected = geo.kv_heads * (geo.head_dim + geo.v_head_dim) * geo.layers // 32
        assert spec.component(f"{sub}_kv_scales").bytes == expected
        assert spec.component(f"{sub}_kv").bytes == geo.kv_heads * (geo.head_dim + geo.v_head_dim) * geo.layers


def test_kv_dtype_changes_payload_bytes() -> None:
    auto = run("llama-3.1-8b").spec.component("full_kv").bytes
    assert auto == 32 * 2 * 8 * 128 * 2  # layers * (K,V) * heads * dim * bf16
    assert run("llama-3.1-8b", "--kv-cache-dtype", "fp8_e4m3").spec.component("full_kv").bytes == auto // 2
    assert run("llama-3.1-8b", "--kv-cache-dtype", "nvfp4").spec.component("full_kv").bytes == auto // 4


def test_mla_is_one_latent_row_without_scales() -> None:
    spec = run("deepseek-v3").spec
    assert spec.names == ("mla_kv",)
    assert spec.component("mla_kv").bytes == 61 * (512 + 64) * 2


def test_gdn_state_shapes_follow_mamba2_state_shape() -> None:
    spec = run("qwen3-next-80b-a3b").spec
    rec = spec.recurrent
    assert rec.layers == 36 and spec.full.layers == 12  # every 4th layer is full attention
    assert rec.conv_shapes == ((2 * 16 * 128 + 32 * 128, 3),)
    assert rec.temporal_shape == (32, 128, 128)
    assert rec.temporal_dtype == "float32"


def test_mamba_ssm_dtype_flag_wins_over_the_config_but_not_for_inkling() -> None:
    assert run("qwen3-next-80b-a3b", "--mamba-ssm-dtype", "bfloat16").spec.recurrent.temporal_dtype == "bfloat16"
    assert run("inkling-small", "--mamba-ssm-dtype", "float32").spec.recurrent.conv_dtype == "bfloat16"


def test_tp_that_does_not_divide_state_heads_is_a_config_error() -> None:
    from kvdoctor._exceptions import ConfigError

    with pytest.raises(ConfigError, match="not divisible by --tp-size 3"):
        run("qwen3-next-80b-a3b", "--tp", "3")


def test_swa_head_geometry_is_read_from_the_swa_fields() -> None:
    spec = fixture_with("inkling-small", swa_num_key_value_heads=2, swa_head_dim=64).spec
    assert (spec.swa.kv_heads, spec.swa.head_dim, spec.swa.v_head_dim) == (2, 64, 64)
    assert (spec.full.kv_heads, spec.full.head_dim) == (4, 128)


def test_missing_geometry_field_is_named() -> None:
    from kvdoctor._exceptions import ConfigError

    with pytest.raises(ConfigError, match="'linear_num_key_heads' is missing"):
        fixture_with("qwen3-next-80b-a3b", linear_num_key_heads=None)
