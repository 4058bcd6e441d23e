"""vLLM's ``max_model_len`` in kvdoctor's vLLM rule model (core/vllm/model_len.py), pure: no vLLM, no torch.

The derived length over several length keys and RoPE scaling, ``--max-model-len`` as vLLM reads it (and refuses
it), and where the rule model uses it: the Mamba block without prefix caching. tests/engines/vllm holds the same
answers to vLLM's own ``_get_and_verify_max_len`` (tests/engines/vllm/test_vllm_drift.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvdoctor._exceptions import ConfigError, FlagError
from kvdoctor.core.config import ModelConfig, load_config
from kvdoctor.core.vllm import matrix, rules
from kvdoctor.core.vllm.analysis import analyze_vllm
from kvdoctor.core.vllm.flags import parse_vllm_flags
from kvdoctor.core.vllm.model_len import max_model_len
from kvdoctor.core.vllm.specs import SpecKind


def config(tmp_path: Path, base: str = "llama-3.1-8b", **fields: Any) -> ModelConfig:
    """A bundled fixture's config.json with FIELDS replaced (None: removed)."""
    doc = dict(load_config(base).top)
    for key, value in fields.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return load_config(str(path))


# --- the derived length ---


def test_the_smallest_length_key_wins_and_names_itself(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_position_embeddings=32768, n_positions=16384, seq_length=65536, max_seq_len=20000)
    got = max_model_len(cfg)
    assert (got.tokens, got.key, got.refusal) == (16384, "n_positions", None)
    assert "n_positions=16384" in got.reason


def test_a_truthy_model_max_length_wins_over_a_smaller_key(tmp_path: Path) -> None:
    """Command-R: derive_max_model_len_and_key returns model_max_length even when another key is smaller."""
    got = max_model_len(config(tmp_path, max_position_embeddings=8192, model_max_length=131072))
    assert (got.tokens, got.key) == (131072, "model_max_length")


@pytest.mark.parametrize(
    ("rope", "expected"),
    [
        ({"rope_type": "linear", "factor": 4.0}, 4 * 8192),
        ({"type": "dynamic", "factor": 2}, 2 * 8192),  # the legacy key, as patch_legacy_rope_type renames it
        ({"rope_type": "yarn", "factor": 4.0}, 8192),  # already scaled: the factor is not applied again
        ({"rope_type": "llama3", "factor": 8.0}, 8192),
        ({"rope_type": "default"}, 8192),
        ({"rope_type": "linear", "factor": None}, 8192),  # a null factor: vLLM falls back to 1.0
        (
            {"full_attention": {"rope_type": "linear", "factor": 2.0}, "sliding_attention": {"rope_type": "default"}},
            16384,
        ),
    ],
    ids=["linear", "legacy-type", "yarn", "llama3", "default", "null-factor", "nested"],
)
def test_rope_scaling_multiplies_the_derived_length_where_vllm_applies_it(
    tmp_path: Path, rope: dict[str, Any], expected: int
) -> None:
    cfg = config(tmp_path, max_position_embeddings=8192, n_positions=16384, rope_scaling=rope)
    got = max_model_len(cfg)
    assert got.tokens == expected and got.key == "max_position_embeddings"


def test_gemma3_lengths_are_already_scaled(tmp_path: Path) -> None:
    cfg = load_config("gemma-3-12b")
    top = json.loads(json.dumps(dict(cfg.top)))
    top["text_config"]["rope_scaling"] = {"rope_type": "linear", "factor": 8.0}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(top), encoding="utf-8")
    assert max_model_len(load_config(str(path))).tokens == cfg.text["max_position_embeddings"]


def test_longrope_defaults_to_the_original_length(tmp_path: Path) -> None:
    rope = {"rope_type": "longrope", "factor": 32.0, "short_factor": [1.0], "long_factor": [1.0]}
    cfg = config(tmp_path, max_position_embeddings=131072, original_max_position_embeddings=4096, rope_scaling=rope)
    assert max_model_len(cfg).tokens == 4096
    assert max_model_len(cfg, 65536).tokens == 65536


def test_the_sliding_window_caps_only_when_disabled(tmp_path: Path) -> None:
    cfg = load_config("gemma-2-9b")
    window = cfg.text["sliding_window"]
    assert max_model_len(cfg).tokens == cfg.text["max_position_embeddings"] != window
    capped = max_model_len(cfg, disable_sliding_window=True)
    assert (capped.tokens, capped.key) == (window, "sliding_window")


def test_no_length_key_is_vllms_2048_and_says_a_config_class_may_differ(tmp_path: Path) -> None:
    got = max_model_len(config(tmp_path, max_position_embeddings=None))
    assert got.tokens == rules.DEFAULT_MAX_MODEL_LEN and got.key is None
    assert "transformers config class" in got.reason
    assert max_model_len(config(tmp_path, max_position_embeddings=None), 1_000_000).tokens == 1_000_000  # unchecked


def test_a_length_key_that_is_not_a_number_is_exit_2_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="field 'n_positions' must be a") as caught:
        max_model_len(config(tmp_path, n_positions="8k"))
    assert caught.value.exit_code == 2


# --- --max-model-len ---


@pytest.mark.parametrize(
    ("text", "value"),
    [("4096", 4096), ("4k", 4000), ("4K", 4096), ("25.6k", 25600), ("auto", -1), ("AUTO", -1), ("-1", -1)],
)
def test_max_model_len_reads_vllms_spellings(text: str, value: int) -> None:
    flags = parse_vllm_flags(["--max-model-len", text])
    assert flags.max_model_len == value and not flags.not_modelled


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("abc", "argument --max-model-len: invalid human_readable_int_or_auto value: 'abc'"),
        ("1.5K", "Decimals are not allowed with binary suffixes"),
        ("0", "max_model_len must be a positive integer, got int: 0"),
        ("-2", "Input should be greater than or equal to -1"),
    ],
)
def test_a_max_model_len_vllm_refuses_whatever_the_model_is_exit_2(text: str, needle: str) -> None:
    with pytest.raises(FlagError, match=needle) as caught:
        parse_vllm_flags([f"--max-model-len={text}"])
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)


def test_auto_and_a_shorter_length_and_one_too_long() -> None:
    cfg = load_config("nemotron-h-8b")
    longest = cfg.text["max_position_embeddings"]
    assert max_model_len(cfg, -1).tokens == longest
    assert max_model_len(cfg, 3000).tokens == 3000 and max_model_len(cfg, longest).refusal is None
    too_long = max_model_len(cfg, longest + 1)
    assert too_long.refusal is not None and too_long.refusal.where is rules.MAX_LEN_CHECK
    assert f"User-specified max_model_len ({longest + 1}) is greater than the derived" in too_long.refusal.message


def test_a_length_above_the_config_is_a_start_up_refusal_kvd114() -> None:
    a = analyze_vllm("llama-3.1-8b", ["--max-model-len", "10M"])
    assert [r.where for r in a.refusals] == [rules.MAX_LEN_CHECK]
    assert "KVD114-VLLM-REFUSES" in {h.code for h in a.hazards}
    assert "KVD114-VLLM-REFUSES" not in {
        h.code for h in analyze_vllm("llama-3.1-8b", ["--max-model-len", "8k"]).hazards
    }


# --- where it is used: the Mamba block without prefix caching ---


@pytest.mark.parametrize("model", ["nemotron-h-8b", "qwen3-next-80b-a3b"])
def test_without_prefix_caching_the_mamba_block_is_max_model_len(model: str) -> None:
    """The rule vLLM's MambaModelConfig applies: delete it and the Mamba block is the attention block again."""
    on = analyze_vllm(model, ["--enable-prefix-caching"])
    off = analyze_vllm(model, ["--no-enable-prefix-caching"])
    short = analyze_vllm(model, ["--no-enable-prefix-caching", "--max-model-len", "3k"])
    longest = load_config(model).text["max_position_embeddings"]
    for a, block in ((on, on.specs.block_size), (off, longest), (short, 3000)):
        mamba = [s for s in a.specs.layers.values() if s.kind is SpecKind.MAMBA]
        assert mamba and {s.block_size for s in mamba} == {block}
        assert a.specs.mamba_block_size == block and a.report().block_size.mamba_block_size == block
        attention = [g for g in a.groups or () if g.kind is not SpecKind.MAMBA]
        assert attention and {g.spec.block_size for g in attention} == {a.specs.block_size}
    assert off.specs.block_size != longest  # the two blocks differ: the groups show it
    assert "mamba_cache_mode none" in (off.report().block_size.mamba_block_reason or "")


def test_the_mamba_cache_mode_flag_does_not_move_the_block() -> None:
    """vLLM 0.33 resolves the mode from prefix caching alone: --mamba-cache-mode align without it is still none."""
    a = analyze_vllm("nemotron-h-8b", ["--no-enable-prefix-caching", "--mamba-cache-mode", "align"])
    assert a.specs.mamba_block_size == load_config("nemotron-h-8b").text["max_position_embeddings"]


def test_the_json_carries_the_length_for_every_model() -> None:
    facts = analyze_vllm("llama-3.1-8b", ["--max-model-len", "32k"]).report().block_size
    assert (facts.max_model_len, facts.mamba_block_size) == (32000, None)


# --- the drift matrix asks it ---


def test_the_matrix_has_the_max_model_len_lines() -> None:
    for mamba in (False, True):
        cases = {c.name: parse_vllm_flags(c.argv) for c in matrix.cases_for(mamba)}
        assert cases["max-len-3k+no-prefix"].max_model_len == 3000
        assert cases["max-len-auto+no-prefix"].max_model_len == -1
        assert cases["max-len-10M"].max_model_len == 10 * 2**20 and cases["max-len-10M"].prefix_caching
    for model in matrix.vllm_fixtures():  # below every fixture's length, and above it: refused by the rule model
        assert analyze_vllm(model, ("--max-model-len", "3k")).specs.max_model_len.refusal is None  # type: ignore[union-attr]
        assert analyze_vllm(model, ("--max-model-len", "10M")).specs.max_model_len.refusal is not None  # type: ignore[union-attr]


def test_a_matrix_length_vllms_parser_refuses_is_a_kvdoctor_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matrix, "MAX_LEN_CASES", (("max-len-bad", "1.5K", True),))
    with pytest.raises(matrix.MatrixError, match=r"--max-model-len 1\.5K is not a value"):
        matrix.cases_for(False)
