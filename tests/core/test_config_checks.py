"""Configs are validated before any rule reads them (``core/config_checks.py``, ``core/sglang/layer_types.py``).

Each refusal is a ``ConfigError`` (exit 2) naming the file and the field; a config that passes gives
the same answer as before. The sweep at the end feeds every bundled fixture's fields hostile values:
anything but a ``KvdoctorError`` there would be a crash reported as a kvdoctor bug (exit 4).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvdoctor._exceptions import ConfigError, KvdoctorError
from kvdoctor.core import config_checks
from kvdoctor.core.config import bundled_fixtures, load_config, parse_config, read_config_text
from kvdoctor.core.sglang.analysis import analyze_config
from kvdoctor.core.sglang.flags import parse_flags


def _with(fixture: str, **changes: Any) -> str:
    top = json.loads(json.dumps(load_config(fixture).top))
    target = top.get("text_config", top)
    for key, value in changes.items():
        if value is _DROP:
            target.pop(key, None)
        else:
            target[key] = value
    return json.dumps(top)


_DROP = object()


def _analyze(fixture: str, *flags: str, **changes: Any):
    return analyze_config(parse_config(_with(fixture, **changes), f"{fixture}.json"), parse_flags(list(flags)))


@pytest.mark.parametrize(
    ("fixture", "changes", "field", "message"),
    [
        ("llama-3.1-8b", {"num_key_value_heads": 4.5}, "num_key_value_heads", "must be a whole number, got 4.5"),
        ("llama-3.1-8b", {"num_key_value_heads": True}, "num_key_value_heads", "must be a whole number, got True"),
        ("llama-3.1-8b", {"num_key_value_heads": -4}, "num_key_value_heads", "must be a positive integer, got -4"),
        ("llama-3.1-8b", {"head_dim": -4}, "head_dim", "must be a positive integer, got -4"),
        ("llama-3.1-8b", {"head_dim": "128"}, "head_dim", "must be a whole number, got '128'"),
        ("llama-3.1-8b", {"num_hidden_layers": 10_001}, "num_hidden_layers", "exceeds 10,000"),
        ("llama-3.1-8b", {"head_dim": 8_193}, "head_dim", "exceeds 8,192"),
        ("llama-3.1-8b", {"hidden_size": 1_000_001}, "hidden_size", "exceeds 1,000,000"),
        ("llama-3.1-8b", {"sliding_window": -1}, "sliding_window", "must be at least 0"),
        ("llama-3.1-8b", {"head_dim": _DROP, "hidden_size": 16}, "hidden_size", "leaves a head_dim of 0"),
        ("llama-3.1-8b", {"torch_dtype": 16}, "torch_dtype", "must be a string"),
        ("llama-3.1-8b", {"architectures": "LlamaForCausalLM"}, "architectures", "must be a list of class names"),
        ("gpt-oss-20b", {"is_hybrid_swa": "false"}, "is_hybrid_swa", "must be true or false"),
        ("gemma-3-12b", {"num_key_value_heads": 0}, "text_config.num_key_value_heads", "must be a positive integer"),
        ("inkling-small", {"local_layer_ids": ["a"]}, "text_config.local_layer_ids", "layer ids in [0, 15], got 'a'"),
        ("inkling-small", {"local_layer_ids": [0, 16]}, "text_config.local_layer_ids", "in [0, 15], got 16"),
        ("ring-mini-linear-2.0", {"layer_group_size": 0}, "layer_group_size", "must be a positive integer"),
        ("ring-mini-linear-2.0", {"layer_group_size": None}, "layer_group_size", "must be a whole number, got None"),
        ("ring-mini-linear-2.0", {"layer_group_size": [1, 0]}, "layer_group_size", "has 2 entries for 20 layers"),
        (
            "kimi-linear-48b-a3b",
            {"linear_attn_config": {"kda_layers": None, "num_heads": 32, "head_dim": 128}},
            "linear_attn_config.kda_layers",
            "must be a list of layer ids",
        ),
        ("kimi-linear-48b-a3b", {"linear_attn_config": [1]}, "linear_attn_config", "must be an object"),
        ("nemotron-h-8b", {"hybrid_override_pattern": "M" * 55 + "X"}, "hybrid_override_pattern", "M * - E"),
        ("zaya-1", {"zaya_layers": ["a"] * 8}, "zaya_layers", "8 entries but num_hidden_layers is 16"),
    ],
)
def test_fields_no_real_model_has_are_refused_naming_file_and_field(
    fixture: str, changes: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(_with(fixture, **changes), f"/configs/{fixture}.json")
    text = str(refused.value)
    assert text.startswith(f"/configs/{fixture}.json: ") and f"'{field}'" in text and message in text


@pytest.mark.parametrize(
    ("fixture", "changes", "message"),
    [
        (
            "gpt-oss-20b",
            {"layer_types": ["sliding_attention", "full_attention", "sliding_attention"]},
            "field 'layer_types' has 3 entries for 24 layers",
        ),
        ("gpt-oss-20b", {"layer_types": ["sliding_attention", "chunked_attention"] * 12}, "unknown layer kind(s)"),
        ("lfm2-1.2b", {"layer_types": "full_attention"}, "must be a list of strings"),
        ("lfm2-1.2b", {"layer_types": ["conv", "full_attention"] * 24}, "has 48 entries for 16 layers"),
        ("lfm2-1.2b", {"layer_types": ["conv", "attention"] * 8}, "unknown layer kind(s) ['attention']"),
        ("granite-4.0-h-small", {"layer_types": ["mamba"] * 39}, "has 39 entries for 40 layers"),
        ("granite-4.0-h-small", {"layer_types": ["mamba", "sliding_attention"] * 20}, "unknown layer kind(s)"),
    ],
)
def test_layer_lists_are_checked_where_a_family_reads_them(fixture: str, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as refused:
        _analyze(fixture, **changes)
    assert message in str(refused.value)


def test_a_repeated_lfm2_list_no_longer_reports_more_layers_than_the_model_has() -> None:
    good = _analyze("lfm2-1.2b")
    assert good.spec.full.layers + good.spec.recurrent.layers == 16
    with pytest.raises(ConfigError):
        _analyze("lfm2-1.2b", layer_types=load_config("lfm2-1.2b").top["layer_types"] * 3)


def test_step_3_5_may_list_its_mtp_layers_past_the_end() -> None:
    kinds = ["sliding_attention", "full_attention"] * 3
    step = _analyze("gpt-oss-20b", architectures=["Step3p5ForCausalLM"], num_hidden_layers=4, layer_types=kinds)
    assert (step.spec.full.layer_ids, step.spec.swa.layer_ids) == ((1, 3), (0, 2))
    with pytest.raises(ConfigError, match="has 6 entries for 4 layers"):
        _analyze("gpt-oss-20b", num_hidden_layers=4, layer_types=kinds)


def test_null_and_zero_windows_mean_no_window() -> None:
    assert _analyze("llama-3.1-8b", sliding_window=None).spec.sliding_window is None
    assert _analyze("llama-3.1-8b", sliding_window=0).spec.sliding_window is None


def test_every_bundled_fixture_passes_validation() -> None:
    for name in bundled_fixtures():
        config_checks.validate_config(load_config(name))


# --- Reading bounds ---


def test_a_file_larger_than_any_config_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "model.safetensors"
    big.write_bytes(b"{" + b" " * config_checks.MAX_CONFIG_BYTES + b"}")
    with pytest.raises(ConfigError, match="larger than 16 MiB"):
        read_config_text(big)


@pytest.mark.parametrize("depth", [65, 100_000])
def test_json_nested_deeper_than_64_is_refused(depth: int) -> None:
    text = '{"model_type": "llama", "x": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(ConfigError, match="nested deeper than 64"):
        parse_config(text, "deep.json")


def test_json_depth_counts_objects_and_lists_iteratively() -> None:
    assert config_checks.json_depth({"a": [{"b": 1}]}) == 3
    assert config_checks.json_depth(1) == 0
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    assert config_checks.json_depth(deep) > config_checks.MAX_JSON_DEPTH  # stops early, never recurses


def test_integers_past_the_conversion_limit_are_input_errors() -> None:
    with pytest.raises(ConfigError, match="4300 digits"):
        parse_config('{"model_type": "llama", "x": 1' + "0" * 5000 + "}", "bigint.json")


@pytest.mark.parametrize("model", ["a" * 300, "~nouser-kvdoctor/config.json"])
def test_names_the_file_system_refuses_are_input_errors(model: str) -> None:
    with pytest.raises(ConfigError, match=r"not a usable path|cannot expand the home directory"):
        load_config(model)


# --- Launches SGLang refuses ---


@pytest.mark.parametrize(
    ("heads", "tp", "refused"), [(4, 3, True), (4, 2, False), (4, 8, False), (6, 4, True), (8, 1, False)]
)
def test_tp_must_divide_the_kv_heads_or_be_divided_by_them(heads: int, tp: int, refused: bool) -> None:
    cfg = parse_config(_with("llama-3.1-8b", num_key_value_heads=heads, num_attention_heads=24), "llama.json")
    a = analyze_config(cfg, parse_flags(["--tp-size", str(tp)]))
    tp_refusals = [r for r in a.refusals if r.key == "tp_kv_heads"]
    assert bool(tp_refusals) == refused
    if refused:
        assert f"--tp-size {tp} with {heads} KV heads" in tp_refusals[0].message
        assert tp_refusals[0].where == "sglang/srt/models/llama.py:185-193"


def test_the_tp_rule_is_a_kvd014_hazard_with_the_analysis_shown_and_spares_mla() -> None:
    a = _analyze("llama-3.1-8b", "--tp-size", "3")  # 8 KV heads, 32 attention heads: both asserts fail
    assert {r.key for r in a.refusals} == {"tp_heads", "tp_kv_heads"}
    kvd014 = [h for h in a.hazards if h.code == "KVD014-SGLANG-REFUSES"]
    assert len(kvd014) == 2 and all(
        h.severity == "error" and h.where.startswith("sglang/srt/models/llama.py:") for h in kvd014
    )
    assert a.spec.full.kv_heads == 2 and a.layout.kv_pool == "MHATokenToKVPool"  # the analysis is still there
    assert not _analyze("deepseek-v3", "--tp-size", "3").refusals  # a latent row is not split by heads


# --- The sweep: hostile values in every field of every fixture ---

HOSTILE = [-4, 0, 4.5, True, 10**12, "x", [], {}, None, [1, "a"], "full_attention", [[1]]]


@pytest.mark.parametrize("fixture", sorted(bundled_fixtures()))
def test_hostile_values_in_any_field_are_input_errors_never_crashes(fixture: str) -> None:
    base = load_config(fixture)
    crashes = []
    for key in sorted(set(base.text) | set(base.top)):
        for value in HOSTILE:
            text = _with(fixture, **{key: value})
            for flags in ([], ["--tp-size", "2"]):
                try:
                    analyze_config(parse_config(text, fixture), parse_flags(flags))
                except KvdoctorError:
                    pass
                except Exception as exc:  # the point of the sweep: nothing else may escape
                    crashes.append(f"{key}={value!r} {flags}: {type(exc).__name__}: {exc}")
    assert not crashes, "\n".join(crashes[:10])
