"""Classification of each bundled family, against what SGLang's predicates decide (rules.py rows)."""

from __future__ import annotations

import pytest

from kvdoctor._exceptions import UnknownModelError
from kvdoctor.core.config import load_config, parse_config
from kvdoctor.core.sglang.families import classify

# (fixture, family, uses_ssm_state, is_hybrid_swa, is_mla): expectations restated from
# sglang/srt/configs/hybrid_arch.py and model_config.py at 0.5.23.
EXPECTED = [
    ("llama-3.1-8b", "dense", False, False, False),
    ("qwen3-8b", "dense", False, False, False),
    ("deepseek-v3", "mla", False, False, True),
    ("gpt-oss-20b", "hybrid_swa", False, True, False),
    ("gemma-2-9b", "dense", False, False, False),  # not in is_hybrid_swa_model's list
    ("gemma-3-12b", "dense", False, False, False),
    ("qwen3-next-80b-a3b", "gdn", True, False, False),
    ("qwen3.5-moe", "gdn", True, False, False),
    ("nemotron-h-8b", "nemotron_h", True, False, False),
    ("falcon-h1-1.5b", "falcon_h1", True, False, False),
    ("lfm2-1.2b", "lfm2", True, False, False),
    ("lfm2-8b-a1b", "lfm2", True, False, False),
    ("granite-4.0-h-small", "granite_hybrid", True, False, False),
    ("granite-4.0-micro", "dense", False, False, False),  # no "mamba" layer: mamba2_config is None
    ("zaya-1", "zaya", True, False, False),
    ("mamba2-2.7b", "mamba2", True, False, False),
    ("falcon-mamba-7b", "mamba1", True, False, False),
    ("kimi-linear-48b-a3b", "kda", True, False, True),
    ("glm5-next", "glm5_next", True, False, True),
    ("ring-mini-linear-2.0", "lightning", True, False, True),
    ("minicpm-sala", "lightning", True, False, False),
    ("inkling-small", "inkling", True, True, False),
]


@pytest.mark.parametrize(("name", "family", "ssm", "swa", "mla"), EXPECTED)
def test_family_of_each_fixture(name: str, family: str, ssm: bool, swa: bool, mla: bool) -> None:
    cls = classify(load_config(name))
    assert (cls.family, cls.uses_ssm_state, cls.is_hybrid_swa, cls.is_mla) == (family, ssm, swa, mla)


def test_disable_hybrid_swa_memory_turns_the_swa_pool_off() -> None:
    assert not classify(load_config("gpt-oss-20b"), disable_hybrid_swa_memory=True).is_hybrid_swa


def _cfg(**fields: object):
    import json

    return parse_config(json.dumps(fields), "test")


def test_bailing_hybrid_is_kda_with_short_conv_and_lightning_without() -> None:
    base = {"model_type": "bailing_hybrid", "architectures": ["BailingMoeV2_5ForCausalLM"]}
    assert classify(_cfg(**base, short_conv_kernel_size=4)).family == "kda"
    assert classify(_cfg(**base)).family == "lightning"


def test_minicpm_needs_lightning_layers() -> None:
    base = {"model_type": "minicpm_sala", "architectures": ["MiniCPMSALAForCausalLM"], "num_hidden_layers": 4}
    assert classify(_cfg(**base, mixer_types=["minicpm4", "lightning"])).uses_ssm_state  # an alias
    assert not classify(_cfg(**base, mixer_types=["minicpm4"])).uses_ssm_state


def test_opt_in_is_hybrid_swa_on_the_text_config() -> None:
    cfg = _cfg(model_type="llama", architectures=["LlamaForCausalLM"], is_hybrid_swa=True)
    assert classify(cfg).is_hybrid_swa


def test_unknown_model_type_is_refused_not_guessed() -> None:
    with pytest.raises(UnknownModelError, match="'frobnicator'"):
        classify(_cfg(model_type="frobnicator", architectures=["FrobForCausalLM"]))


def test_known_architecture_with_a_model_type_no_config_loader_builds_is_refused() -> None:
    """SGLang's get_config builds the config through AutoConfig, which raises on a model_type it does not
    know: a registered architecture does not make such a config servable (issue 16)."""
    with pytest.raises(UnknownModelError, match="field 'model_type' = 'some_new_llama' is not a model type SGLang"):
        classify(_cfg(model_type="some_new_llama", architectures=["LlamaForCausalLM"]))


def test_a_model_type_the_loader_knows_with_a_registered_architecture_is_classified() -> None:
    cls = classify(_cfg(model_type="llama", architectures=["LlamaForCausalLM"]))
    assert (cls.family, cls.uses_ssm_state) == ("dense", False)
