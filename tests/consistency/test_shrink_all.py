"""``--shrink`` on every bundled fixture and every architecture the servers' registries serve: a tiny config
transformers builds a causal-LM model from, with consistent dimensions, or a one-line refusal before any work.

The pure part (every fixture, both servers' shrinks) runs in the main suite. Building the models needs
transformers, which the real-server environment holds: the fixtures and a sample of SGLang's registry are marked
``server`` (``make test-server``, .venv-server/), the whole registry ``server`` and ``matrix``
(``make consistency-matrix``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.consistency.shrink import MAX_LAYERS, PATTERN_KEYS, SERVERS, inconsistencies, shrink

FIXTURES = sorted(Path(__file__).resolve().parents[2].joinpath("fixtures", "models").glob("*.json"))
# Model types a user brings that transformers has no causal-LM class for (measured: exit 4 after the run directory).
NO_CAUSAL_LM = ("glm5-next", "step-3.5", "inkling-small", "beam", "gigachat-3.5", "minicpm-sala")
SAMPLE = ("llama", "gemma3", "qwen3_next", "granitemoehybrid", "falcon_h1", "deepseek_v3", "llama4_text", "gpt2")


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def shrunk_or_refused(config: dict[str, Any], server: str) -> dict[str, Any] | str:
    """The shrunk config, or the refusal's text (one line)."""
    try:
        return shrink(config, server=server)
    except InputError as exc:
        return str(exc)


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_every_fixture_shrinks_consistently_or_is_refused_in_one_line(path: Path, server: str) -> None:
    got = shrunk_or_refused(_load(path), server)
    if isinstance(got, str):
        assert "\n" not in got and "--shrink" in got and len(got) < 400, got
        return
    assert inconsistencies(got) == []
    for config in (got, got.get("text_config")):
        if not isinstance(config, dict) or "num_hidden_layers" not in config:
            continue
        assert config["num_hidden_layers"] <= MAX_LAYERS
        for key in PATTERN_KEYS:
            if isinstance(config.get(key), (list, str)):
                assert len(config[key]) == config["num_hidden_layers"], key


@pytest.mark.parametrize("name", NO_CAUSAL_LM)
def test_a_model_type_without_a_causal_lm_class_is_refused_naming_it(name: str) -> None:
    path = next(p for p in FIXTURES if p.stem == name)
    config = _load(path)
    with pytest.raises(InputError, match=rf"model_type '{config['model_type']}' has no causal-LM class"):
        shrink(config)


@pytest.mark.parametrize("server", SERVERS)
def test_granite_micros_mamba_state_matches_the_shrunk_width(server: str) -> None:
    """Measured: the shrink left 128 Mamba heads x 40 against hidden 128 (transformers' validate_architecture)."""
    small = shrink(_load(next(p for p in FIXTURES if p.stem == "granite-4.0-micro")), server=server)
    assert small["mamba_n_heads"] * small["mamba_d_head"] == small["mamba_expand"] * small["hidden_size"]
    assert small["mamba_n_heads"] % small["mamba_n_groups"] == 0


def test_kimis_one_based_layer_lists_are_cut_with_the_layers() -> None:
    small = shrink(_load(next(p for p in FIXTURES if p.stem == "kimi-linear-48b-a3b")))
    linear = small["linear_attn_config"]
    assert small["num_hidden_layers"] == 4
    assert linear["kda_layers"] == [1, 2, 3] and linear["full_attn_layers"] == [4]


def test_per_layer_config_keeps_only_the_kept_layers_renumbered() -> None:
    kinds = ["sliding_attention"] * 5 + ["full_attention"]
    config = {
        "model_type": "gemma4_text",
        "num_hidden_layers": 6,
        "layer_types": kinds,
        "per_layer_config": {"05": {"head_dim": 512}},
    }
    small = shrink(config)
    assert small["layer_types"] == ["sliding_attention", "full_attention"]
    assert small["per_layer_config"] == {"1": {"head_dim": 32}}


def test_jambas_periodic_kinds_survive_the_cut() -> None:
    """Jamba says its kinds by period and offset (attention 4 of 8, experts 1 of 2): two layers kept only Mamba."""
    config = {"model_type": "jamba", "num_hidden_layers": 32, "num_experts": 16}
    config |= {"attn_layer_period": 8, "attn_layer_offset": 4, "expert_layer_period": 2, "expert_layer_offset": 1}
    small = shrink(config, server="vllm")
    layers = range(small["num_hidden_layers"])
    attention = [i for i in layers if i % small["attn_layer_period"] == small["attn_layer_offset"]]
    experts = [i for i in layers if i % small["expert_layer_period"] == small["expert_layer_offset"]]
    assert len(attention) == 1 and len(experts) >= 1 and set(layers) - set(attention) - set(experts)


def test_a_layer_count_under_another_name_is_cut() -> None:
    """LongCat-Flash counts its layers as num_layers: it kept 28."""
    small = shrink(_load(next(p for p in FIXTURES if p.stem == "longcat-flash")))
    assert small["num_layers"] <= MAX_LAYERS


# ---- transformers builds every shrunk config (.venv-server) ---------------------------------------------------


def _built(config: dict[str, Any]) -> int:
    """Build CONFIG's model as checkpoint.build does (CPU, float32, no file written); its parameter count."""
    import torch
    from transformers import AutoModelForCausalLM

    from kvdoctor.consistency import checkpoint

    checkpoint.check_buildable(config)
    with checkpoint._quiet_transformers():
        model = AutoModelForCausalLM.from_config(checkpoint.hf_config_of(config), dtype=torch.float32)
    return sum(p.numel() for p in model.parameters())


def _outcome(config: dict[str, Any], server: str) -> tuple[str, str | int]:
    """("refused", why) before any work, or ("built", parameters); anything else raises."""
    got = shrunk_or_refused(config, server)
    if isinstance(got, str):
        return "refused", got
    assert inconsistencies(got) == []
    from kvdoctor.consistency import checkpoint

    try:
        checkpoint.check_buildable(got)
    except InputError as exc:
        return "refused", str(exc)
    return "built", _built(got)  # check_buildable said yes: the real build must not fail


@pytest.mark.server
@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_transformers_builds_every_shrunk_fixture_or_kvdoctor_refused_it(path: Path, server: str) -> None:
    pytest.importorskip("transformers")
    kind, what = _outcome(_load(path), server)
    if kind == "built":
        assert isinstance(what, int) and what < 50_000_000, f"{path.stem}: {what:,} parameters is not tiny"
    else:
        assert "\n" not in str(what)


@pytest.mark.server
def test_the_causal_lm_table_is_the_installed_transformers() -> None:
    """shrink refuses from a generated table (no transformers in prepare): it must be the installed one's."""
    pytest.importorskip("transformers")
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from kvdoctor.core.sglang._generated.transformers_causal_lm import TRANSFORMERS_CAUSAL_LM_MODEL_TYPES

    assert set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) == TRANSFORMERS_CAUSAL_LM_MODEL_TYPES


def _registry_configs(only: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Every model type SGLang's registry serves, as drift --all-architectures builds it (class defaults)."""
    architectures = pytest.importorskip("kvdoctor.engines.sglang.architectures")
    pytest.importorskip("sglang")
    _, candidates = architectures.candidates()
    out: dict[str, dict[str, Any]] = {}
    for c in candidates:
        if c.architecture is None or (only and c.model_type not in only):
            continue
        try:
            out[c.model_type] = json.loads(json.dumps(architectures.config_dict(c), default=str))
        except Exception:  # the class does not construct with its defaults: drift skips it too
            continue
    return out


@pytest.mark.server
def test_a_sample_of_sglangs_registry_shrinks_and_builds() -> None:
    configs = _registry_configs(SAMPLE)
    assert set(configs) == set(SAMPLE)
    for model_type, config in configs.items():
        for server in SERVERS:
            kind, what = _outcome(config, server)
            assert kind == "built", f"{model_type} ({server}): {what}"


@pytest.mark.server
@pytest.mark.matrix
def test_every_architecture_sglangs_registry_serves_shrinks_and_builds_or_is_refused() -> None:
    outcomes = {mt: _outcome(config, "sglang") for mt, config in _registry_configs().items()}
    built = [mt for mt, (kind, _) in outcomes.items() if kind == "built"]
    assert len(built) > len(outcomes) // 2, outcomes
    for model_type, (kind, what) in outcomes.items():
        if kind == "refused":
            assert "\n" not in str(what), model_type
        else:
            assert isinstance(what, int) and what < 200_000_000, f"{model_type}: {what:,} parameters"
