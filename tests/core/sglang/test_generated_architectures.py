"""Rule-model corrections found by ``drift --all-architectures`` (issue 20, point 3), checked without SGLang.

Each config below is the part of the one ``drift --all-architectures`` generates from SGLang's config class
defaults that the rules read; each test turns red if its correction is removed:

- Gemma 3n keeps one ``intermediate_size`` per layer (``rules.GEMMA3N_INTERMEDIATE_SOURCE``);
- a loop model holds one KV-pool layer per layer and loop (``rules.LOOP_LAYERS_SOURCE``: Nanbeige 22 x 2);
- Laguna's window without a sliding layer and IQuest Q1's MTP draft (its one layer slides) each leave one SWAKVPool
  sub-pool without layers (drift shows it as none on both sides:
  ``tests/engines/sglang/test_sglang_drift_architectures.py``);
- IQuest Q1 runs FA3, so page 1, and refuses any other backend (``rules.IQUEST_Q1_BACKEND_SOURCE``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvdoctor._exceptions import ConfigError
from kvdoctor.core.config import parse_config
from kvdoctor.core.sglang import rules
from kvdoctor.core.sglang.analysis import Analysis, analyze_config
from kvdoctor.core.sglang.flags import parse_flags

GEMMA3N_TEXT: dict[str, Any] = {
    "model_type": "gemma3n_text",
    "architectures": ["Gemma3nForCausalLM"],
    "hidden_size": 2048,
    "intermediate_size": [16384] * 35,
    "num_hidden_layers": 35,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "max_position_embeddings": 32768,
    "sliding_window": 512,
    "layer_types": ["sliding_attention"] * 4 + ["full_attention"] + ["sliding_attention"] * 30,
}
NANBEIGE: dict[str, Any] = {
    "model_type": "nanbeige",
    "architectures": ["NanbeigeForCausalLM"],
    "hidden_size": 3072,
    "intermediate_size": 10752,
    "num_hidden_layers": 22,
    "num_attention_heads": 48,
    "num_key_value_heads": 48,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "num_loops": 2,
}
LAGUNA: dict[str, Any] = {
    "model_type": "laguna",
    "architectures": ["LagunaForCausalLM"],
    "hidden_size": 2048,
    "num_hidden_layers": 40,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "sliding_window": 512,
    "layer_types": ["full_attention"] * 40,
}
IQUEST_Q1_MTP: dict[str, Any] = {
    "model_type": "iquest_q1_mtp",
    "architectures": ["IQuestQ1MTP"],
    "hidden_size": 3072,
    "num_hidden_layers": 1,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 524288,
    "sliding_window": 512,
    "layer_types": ["sliding_attention"],
    "hybrid_layer_pattern": [1],
    "is_hybrid_swa": True,
}


def analysed(config: dict[str, Any], *flags: str, **changes: Any) -> Analysis:
    text = json.dumps({**config, **changes})
    return analyze_config(parse_config(text, f"{config['model_type']}.json"), parse_flags(list(flags)))


# -- Gemma 3n: a per-layer intermediate_size -----------------------------------------------------------------


def test_gemma3n_per_layer_intermediate_size_is_served() -> None:
    analysis = analysed(GEMMA3N_TEXT)
    assert analysis.spec.full is not None and analysis.spec.full.layers == 35
    nested = {"model_type": "gemma3n", "architectures": ["Gemma3nForConditionalGeneration"],
              "text_config": GEMMA3N_TEXT}  # fmt: skip
    config = parse_config(json.dumps(nested), "gemma3n.json")
    assert analyze_config(config, parse_flags([])).spec.full.layers == 35


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"intermediate_size": [16384] * 34}, "field 'intermediate_size' has 34 entries for 35 layers"),
        ({"intermediate_size": [16384] * 3 + [4.5] + [16384] * 31}, "field 'intermediate_size[3]' must be a whole"),
        ({"intermediate_size": [16384] * 34 + [0]}, "field 'intermediate_size[34]' must be a positive integer"),
    ],
    ids=["wrong-length", "not-whole", "zero"],
)
def test_a_malformed_per_layer_intermediate_size_is_refused_naming_the_entry(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        analysed(GEMMA3N_TEXT, **changes)


def test_a_per_layer_intermediate_size_is_still_refused_where_the_class_keeps_one_number() -> None:
    with pytest.raises(ConfigError, match="field 'intermediate_size' must be a whole number"):
        analysed(NANBEIGE, intermediate_size=[10752] * 22)


# -- loop models: one KV-pool layer per layer and loop ---------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "layers"),
    [({}, 44), ({"num_loops": 3}, 66), ({"num_loops": 1}, 22), ({"num_loops": None}, 22)],
    ids=["two-loops", "three-loops", "one-loop", "null-is-one"],
)
def test_a_loop_model_holds_a_kv_layer_per_layer_and_loop(changes: dict[str, Any], layers: int) -> None:
    full = analysed(NANBEIGE, **changes).spec.full
    assert full is not None and full.layers == layers
    assert full.layer_ids == tuple(range(layers))  # ids layer + loop * num_hidden_layers


def test_nanbeige_without_num_loops_takes_its_config_class_default() -> None:
    config = {k: v for k, v in NANBEIGE.items() if k != "num_loops"}
    assert analysed(config).spec.full.layers == 22 * rules.CLASS_DEFAULT_LOOPS["nanbeige"] == 44


def test_loop_num_wins_over_num_loops_and_other_models_keep_one_layer_each() -> None:
    assert analysed(NANBEIGE, loop_num=4).spec.full.layers == 88
    plain = {**NANBEIGE, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    plain.pop("num_loops")
    assert analysed(plain).spec.full.layers == 22


def test_an_absurd_loop_count_is_refused() -> None:
    with pytest.raises(ConfigError, match="field 'num_loops' = 1,000 exceeds 64"):
        analysed(NANBEIGE, num_loops=1000)


# -- SWAKVPool sub-pools without layers (shown as none on both sides of drift: tests/engines) ----------------------


def test_laguna_with_a_window_but_no_sliding_layer_builds_an_swa_sub_pool_without_layers() -> None:
    analysis = analysed(LAGUNA)
    assert analysis.layout.kv_pool == "SWAKVPool"
    assert analysis.spec.swa is None and analysis.spec.full is not None and analysis.spec.full.layers == 40


def test_a_draft_whose_one_layer_slides_has_no_full_layer() -> None:
    analysis = analysed(IQUEST_Q1_MTP)
    assert analysis.layout.kv_pool == "SWAKVPool"
    assert analysis.spec.full is None and analysis.spec.swa is not None and analysis.spec.swa.layers == 1


# -- IQuest Q1: FA3 only -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", sorted(rules.IQUEST_Q1_ARCHS))
def test_iquest_q1_runs_fa3_at_page_one_on_sm100(arch: str) -> None:
    analysis = analysed(IQUEST_Q1_MTP, architectures=[arch])
    assert analysis.flags.attention_backend == rules.IQUEST_Q1_BACKEND == "fa3"
    assert analysis.flags.page_size == 1  # not trtllm_mha's 64
    assert not analysis.refusals


def test_iquest_q1_draft_on_a_decode_server_keeps_cpu_tensor() -> None:
    analysis = analysed(IQUEST_Q1_MTP, "--disaggregation-mode", "decode", "--max-total-tokens", "65536")
    assert analysis.backup.backend == "cpu_tensor"  # an all-SWA pool has no full tokens per layer


@pytest.mark.parametrize(
    "flags",
    [("--attention-backend", "triton"), ("--decode-attention-backend", "flashinfer")],
    ids=["attention", "decode"],
)
def test_iquest_q1_refuses_any_other_attention_backend(flags: tuple[str, ...]) -> None:
    analysis = analysed(IQUEST_Q1_MTP, *flags)
    assert [r.key for r in analysis.refusals] == ["iquest_q1_backend"]
    assert "requires FA3 attention" in analysis.refusals[0].message
    assert analysis.refusals[0].where == "sglang/srt/arg_groups/model_overrides/iquest_q1.py:19-23"


def test_iquest_q1_accepts_fa3_named_on_one_phase() -> None:
    analysis = analysed(IQUEST_Q1_MTP, "--prefill-attention-backend", "fa3")
    assert not analysis.refusals and analysis.flags.page_size == 1


def test_an_swa_sub_pool_without_layers_still_registers_its_block_scales() -> None:
    """SWAKVPool builds both sub-pools, so an MXFP8 one without layers still registers its scale state."""
    flags = ("--disaggregation-mode", "decode", "--kv-cache-dtype", "mxfp8", "--attention-backend", "fa4")
    analysis = analysed(LAGUNA, *flags, "--page-size", "128")
    assert analysis.spec.swa is None and analysis.layout.swa_pool == "MHATokenToKVPoolMXFP8"
    assert analysis.pd_state_types == ("SWA", "BLOCK_SCALE", "BLOCK_SCALE_SWA")
