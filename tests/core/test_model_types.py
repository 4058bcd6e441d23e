"""A ``model_type`` no server's config loader builds is refused, on both servers (issue 16, item 3).

SGLang's ``get_config`` and vLLM's ``HFConfigParser`` build the config through transformers'
``AutoConfig``, which raises on a model type it does not know; a known architecture alone used to get
such a config analysed as dense and passed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor._exceptions import UnknownModelError
from kvdoctor.core.config import bundled_fixtures, load_config
from kvdoctor.core.sglang._generated.model_types import SGLANG_MODEL_TYPES
from kvdoctor.core.sglang.analysis import analyze
from kvdoctor.core.vllm._generated.model_types import VLLM_MODEL_TYPES
from kvdoctor.core.vllm.analysis import analyze_vllm

VLLM_FIXTURES = ["qwen3-next-80b-a3b", "nemotron-h-8b", "gpt-oss-20b", "gemma-3-12b", "deepseek-v3", "llama-3.1-8b"]


def _llama(tmp_path: Path, **changes: object) -> str:
    top = {**load_config("llama-3.1-8b").top, **changes}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(top), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("model_type", "hint"),
    [("[/bold]llama", "; did you mean 'llama'?"), ("lama", "; did you mean 'llama'?"), ("zzzzqqqq", "")],
)
def test_sglang_refuses_a_model_type_its_loader_does_not_know(tmp_path: Path, model_type: str, hint: str) -> None:
    path = _llama(tmp_path, model_type=model_type)
    with pytest.raises(UnknownModelError) as refused:
        analyze(path, [])
    message = str(refused.value)
    assert message.startswith(f"{path}: field 'model_type' = {model_type!r} is not a model type SGLang 0.5.23")
    assert "AutoConfig.from_pretrained raises (sglang/srt/utils/hf_transformers/config.py:228-233)" in message
    assert message.endswith(hint) and refused.value.exit_code == 2


@pytest.mark.parametrize("model_type", ["[/bold]llama", "lama"])
def test_vllm_refuses_it_the_same_way(tmp_path: Path, model_type: str) -> None:
    path = _llama(tmp_path, model_type=model_type)
    with pytest.raises(UnknownModelError) as refused:
        analyze_vllm(path, [])
    message = str(refused.value)
    assert message.startswith(f"{path}: field 'model_type' = {model_type!r} is not a model type vLLM 0.33.0")
    assert "(vllm/transformers_utils/config.py:443-452); did you mean 'llama'?" in message


def test_remote_code_configs_are_not_judged_by_the_table(tmp_path: Path) -> None:
    """A checkpoint with its own config class (auto_map.AutoConfig, loaded with --trust-remote-code)
    declares model types kvdoctor cannot list; the architecture decides, as before."""
    path = _llama(tmp_path, model_type="my_llama", auto_map={"AutoConfig": "configuration_my.MyConfig"})
    assert analyze(path, []).classification.family == "dense"


def test_a_longcat_architecture_is_loaded_whatever_its_model_type(tmp_path: Path) -> None:
    from kvdoctor.core.sglang.families import check_loadable

    cfg = load_config(_llama(tmp_path, model_type="longcat_custom", architectures=["LongcatFlashForCausalLM"]))
    check_loadable(cfg)  # SGLang's _try_load_longcat_config builds it before AutoConfig is asked


def test_every_bundled_fixture_names_a_model_type_the_loaders_know() -> None:
    for name in bundled_fixtures():
        assert load_config(name).model_type in SGLANG_MODEL_TYPES, name
    for name in VLLM_FIXTURES:
        assert load_config(name).model_type in VLLM_MODEL_TYPES, name


def test_the_tables_hold_transformers_and_the_servers_own_config_classes() -> None:
    assert {"llama", "qwen3_next", "nemotron_h"} <= SGLANG_MODEL_TYPES & VLLM_MODEL_TYPES  # transformers'
    assert {"inkling_model", "kimi_k2", "chatglm"} <= SGLANG_MODEL_TYPES  # SGLang's _CONFIG_REGISTRY
    assert {"chatglm", "deepseek_v32"} <= VLLM_MODEL_TYPES  # vLLM's _CONFIG_REGISTRY
