"""The vLLM rule model's hybrids beyond the first 13 architectures (no vLLM, no torch): Granite 4.0
(GraniteMoeHybrid), Nemotron-H as transformers 5 writes it, the pure-Mamba offload rule, and the refusals naming
what is missing (tests/engines/vllm holds vLLM's own code to the same answers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor._exceptions import UnknownModelError
from kvdoctor.core.config import bundled_fixtures
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.analysis import analyze_vllm
from kvdoctor.core.vllm.connectors import Status
from kvdoctor.core.vllm.specs import SpecKind

KVDOCTOR = (sys.executable, "-m", "kvdoctor")
OFFLOAD = ["--kv-offloading-size", "8", "--kv-offloading-backend", "native"]


def write(tmp_path: Path, **config: object) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def granite(tmp_path: Path, layer_types: list[str] | None, **extra: object) -> str:
    base: dict[str, object] = {
        "architectures": ["GraniteMoeHybridForCausalLM"],
        "model_type": "granitemoehybrid",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 999,  # not read by vLLM's GraniteMoeHybridAttention: hidden_size // heads
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
        "mamba_n_heads": 8,
        "mamba_d_head": 64,
        "mamba_d_state": 16,
        "mamba_n_groups": 1,
        "mamba_expand": 2,
        "mamba_d_conv": 4,
    }
    if layer_types is not None:
        base["layer_types"] = layer_types
    return write(tmp_path, **{**base, **extra})


def test_granite_4_h_small_is_a_mamba2_hybrid_from_layer_types() -> None:
    a = analyze_vllm("granite-4.0-h-small", [])
    assert a.specs.family is rules.Family.MAMBA2_LAYER_TYPES
    mamba = [s for s in a.specs.layers.values() if s.kind is SpecKind.MAMBA]
    attention = [s for s in a.specs.layers.values() if s.kind is SpecKind.FULL]
    assert (len(mamba), len(attention)) == (36, 4)
    # mamba2_state_shape: conv_dim = mamba_expand * hidden (8192) + 2 * groups (1) * state (128) = 8448
    assert mamba[0].shapes == ((3, 8448), (128, 64, 128))
    assert mamba[0].dtypes == ("bfloat16", "bfloat16")  # no SSM dtype override: "auto" is the conv dtype
    assert attention[0].head_size == 4096 // 32 and attention[0].num_kv_heads == 8
    assert "model.layers.0.mixer" in a.specs.layers and a.groups is not None


def test_granite_4_micro_has_attention_only() -> None:
    a = analyze_vllm("granite-4.0-micro", [])
    assert {s.kind for s in a.specs.layers.values()} == {SpecKind.FULL}
    assert a.groups is not None and len(a.groups) == 1


def test_granite_head_size_is_hidden_over_heads_and_legacy_names_equal_new(tmp_path: Path) -> None:
    legacy = analyze_vllm(granite(tmp_path, ["mamba", "attention", "mamba", "attention"]), [])
    new = analyze_vllm(granite(tmp_path, ["linear_attention", "full_attention"] * 2), [])
    assert legacy.specs.layers == new.specs.layers
    attention = new.specs.layers["model.layers.1.self_attn.attn"]
    assert attention.head_size == 64  # 256 // 4, never the config's head_dim 999


def test_granite_mamba_d_head_auto_and_tp_groups(tmp_path: Path) -> None:
    a = analyze_vllm(granite(tmp_path, None, mamba_d_head="auto"), ["--tensor-parallel-size", "2"])
    mamba = next(iter(a.specs.layers.values()))
    # no layer_types: every layer Mamba2; head 512 // 8 = 64; groups 1 -> 2 at TP 2 (extra_groups_for_head_shards)
    assert len(a.specs.layers) == 4 and mamba.shapes == ((3, (512 + 2 * 2 * 16) // 2), (4, 64, 16))


def test_granite_bad_layer_type_is_one_config_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="layer_types"):
        analyze_vllm(granite(tmp_path, ["mamba", "conv", "mamba", "mamba"]), [])


def test_pure_mamba_model_offloads_without_prefix_caching(tmp_path: Path) -> None:
    # build_offloading_config asserts only where an attention block does not divide the Mamba block: a model with
    # no attention layer passes (vLLM's own answer, tests/engines/vllm/test_vllm_hybrids.py), a hybrid does not.
    pure = analyze_vllm(granite(tmp_path, ["mamba"] * 4), [*OFFLOAD, "--no-enable-prefix-caching"])
    assert [r.status for r in pure.connector.rows] == [Status.CARRIED] * len(pure.connector.rows)
    hybrid = analyze_vllm(granite(tmp_path, ["mamba", "attention"] * 2), [*OFFLOAD, "--no-enable-prefix-caching"])
    assert Status.REFUSED in {r.status for r in hybrid.connector.rows}


def test_jamba_mamba1_layers_from_the_attention_period(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        architectures=["JambaForCausalLM"],
        model_type="jamba",
        hidden_size=256,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=999,
        max_position_embeddings=4096,
        torch_dtype="bfloat16",
    )
    a = analyze_vllm(path, ["--tensor-parallel-size", "2"])
    assert a.specs.family is rules.Family.MAMBA1_HYBRID
    kinds = [s.kind for s in a.specs.layers.values()]
    # JambaConfig's defaults: attention where i % 8 == 4; Mamba1 state conv (3, 512 / 2), SSM (512 / 2, 16)
    assert kinds == [SpecKind.MAMBA] * 4 + [SpecKind.FULL] + [SpecKind.MAMBA] * 3
    mamba = a.specs.layers["model.layers.0.mixer"]
    assert mamba.shapes == ((3, 256), (256, 16)) and mamba.dtypes == ("bfloat16", "bfloat16")
    assert a.specs.layers["model.layers.4.self_attn.attn"].head_size == 64


def lfm2(tmp_path: Path, **extra: object) -> str:
    config = json.loads(bundled_fixtures()["lfm2-1.2b"].read_text())
    return write(tmp_path, **{**config, **extra})


def test_lfm2_short_conv_state_beside_attention(tmp_path: Path) -> None:
    a = analyze_vllm(lfm2(tmp_path, conv_dim=2048), ["--tensor-parallel-size", "2"])
    assert a.specs.family is rules.Family.SHORT_CONV_HYBRID
    kinds = [s.kind for s in a.specs.layers.values()]
    assert (kinds.count(SpecKind.MAMBA), kinds.count(SpecKind.FULL)) == (10, 6)
    conv = next(s for s in a.specs.layers.values() if s.kind is SpecKind.MAMBA)
    assert conv.shapes == ((2, 1024),) and conv.dtypes == ("bfloat16",)  # (conv_L_cache - 1, conv_dim / TP)


def test_lfm2_without_conv_dim_names_it(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="conv_dim"):
        analyze_vllm(lfm2(tmp_path), [])


def test_nemotron_h_layers_from_layers_block_type(tmp_path: Path) -> None:
    config = json.loads(bundled_fixtures()["nemotron-h-8b"].read_text())
    pattern = config.pop("hybrid_override_pattern")
    names = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    config["layers_block_type"] = [names[c] for c in pattern]
    listed = analyze_vllm(write(tmp_path, **config), [])
    assert listed.specs.layers == analyze_vllm("nemotron-h-8b", []).specs.layers


@pytest.mark.parametrize("arch", sorted(rules.REMOVED_ARCHITECTURES))
def test_removed_hybrids_name_the_last_vllm(tmp_path: Path, arch: str) -> None:
    with pytest.raises(UnknownModelError, match=f"until v{rules.REMOVED_ARCHITECTURES[arch]}"):
        analyze_vllm(write(tmp_path, architectures=[arch], model_type="llama", hidden_size=64), [])


@pytest.mark.parametrize("arch", sorted(rules.UNMODELLED))
def test_unmodelled_hybrids_name_what_is_missing(tmp_path: Path, arch: str) -> None:
    gap = rules.UNMODELLED[arch]
    assert arch not in rules.FAMILIES
    with pytest.raises(UnknownModelError) as caught:
        analyze_vllm(write(tmp_path, architectures=[arch], model_type="llama", hidden_size=64), [])
    assert gap.missing in str(caught.value) and gap.where.where in str(caught.value)


def test_refusal_is_exit_2_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, architectures=["FalconH1ForCausalLM"], model_type="falcon_h1", hidden_size=64)
    done = subprocess.run(
        [sys.executable, "-m", "kvdoctor", "inspect", path, "--server", "vllm"], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "parallel hybrid" in done.stderr


def test_consistency_granite_micro_on_vllm_plans(tmp_path: Path) -> None:
    done = subprocess.run(
        [*KVDOCTOR, "consistency", "granite-4.0-micro", "--shrink", "--server", "vllm", "--device", "cpu", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "--num-gpu-blocks-override" in done.stdout and "vllm.entrypoints.openai.api_server" in done.stdout
