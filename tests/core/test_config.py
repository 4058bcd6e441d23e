from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor._exceptions import ConfigError, InputError
from kvdoctor.core.config import bundled_fixtures, load_config


def test_loads_a_file_a_directory_and_a_fixture(write_config) -> None:
    path = write_config({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    assert load_config(str(path)).model_type == "llama"
    assert load_config(str(path.parent)).source == str(path)
    assert load_config("inkling-small").model_type == "inkling_mm_model"


def test_every_bundled_fixture_parses() -> None:
    names = bundled_fixtures()
    assert "inkling-small" in names and len(names) >= 20
    for name in names:
        assert load_config(name).model_type


@pytest.mark.parametrize(
    ("key", "expected"),
    [("text_config", "inner"), ("llm_config", "inner"), ("language_config", "inner")],
)
def test_nested_text_config_is_unwrapped(write_config, key: str, expected: str) -> None:
    path = write_config({"model_type": "outer", key: {"model_type": expected, "num_attention_heads": 4}})
    cfg = load_config(str(path))
    assert cfg.text_model_type == expected
    assert cfg.model_type == "outer"


def test_thinker_config_wins_over_text_config(write_config) -> None:
    thinker = {"text_config": {"model_type": "b"}}
    top = {"model_type": "omni", "text_config": {"model_type": "a"}, "thinker_config": thinker}
    assert load_config(str(write_config(top))).text_model_type == "b"


def test_hub_repo_found_in_the_local_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The layout huggingface_hub itself writes: models--org--name/{refs/main, snapshots/REV/config.json}.
    repo = tmp_path / "models--acme--tiny-llama"
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    assert load_config("acme/tiny-llama").model_type == "llama"
    with pytest.raises(ConfigError, match="not-cached"):
        load_config("acme/not-cached")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "malformed JSON at line 1"),
        ("[1, 2]", "must be a JSON object"),
        ('{"hidden_size": 8}', "'model_type' is missing"),
    ],
)
def test_bad_configs_name_the_file_and_the_problem(write_config, tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(str(path))
    assert str(path) in str(info.value)


def test_missing_model_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_config(str(tmp_path / "nope.json"))
    with pytest.raises(InputError, match=r"no config\.json"):
        load_config(str(tmp_path))


# --- MODEL that exists but is neither a file nor a directory (issue 16, item 5) ---

NO_BLOCK = """
import sys
from kvdoctor._exceptions import ConfigError
from kvdoctor.core.config import load_config, read_config_text
from pathlib import Path
for call in (lambda: load_config(sys.argv[1]), lambda: read_config_text(Path(sys.argv[1]))):
    try:
        call()
    except ConfigError as exc:
        print(exc)
"""


def test_a_fifo_is_named_as_a_fifo_and_never_waited_on(tmp_path: Path) -> None:
    """A FIFO with no writer blocks whoever opens it to read: resolving MODEL must not open it, and reading
    one (should it appear after resolution) must open it non-blocking and refuse it. In a subprocess, so a
    regression fails on the timeout instead of hanging the suite."""
    import os
    import subprocess
    import sys

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    out = subprocess.run(
        [sys.executable, "-c", NO_BLOCK, str(pipe)], capture_output=True, text=True, timeout=60, check=True
    )
    lines = out.stdout.splitlines()
    assert lines == [f"{pipe}: is a FIFO, not a config file or model directory"] * 2, out


def test_a_character_device_is_not_reported_as_missing() -> None:
    with pytest.raises(ConfigError, match=r"^/dev/zero: is a character device, not a config file or model directory$"):
        load_config("/dev/zero")


def test_a_directory_whose_config_json_is_a_fifo(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(ConfigError, match=r"config\.json: is a FIFO, not a config file or model directory"):
        load_config(str(tmp_path))


def test_a_missing_path_is_still_no_such_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file or directory"):
        load_config(str(tmp_path / "absent"))


GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 768, "n_head": 12, "n_layer": 12}


def test_a_config_class_alias_is_read_as_the_standard_field(write_config) -> None:
    """GPT-2 stores num_hidden_layers as n_layer (transformers' attribute_map, which PretrainedConfig resolves and
    SGLang reads): kvdoctor reads it as the class does instead of refusing a model SGLang serves."""
    cfg = load_config(str(write_config(GPT2)))
    assert (cfg.positive_int("num_hidden_layers"), cfg.get("hidden_size"), cfg.get("num_attention_heads")) == (
        12,
        768,
        12,
    )


def test_the_standard_name_wins_over_its_alias_and_another_model_type_has_no_alias(write_config) -> None:
    cfg = load_config(str(write_config({**GPT2, "num_hidden_layers": 6})))
    assert cfg.positive_int("num_hidden_layers") == 6  # the file's own standard field, as PretrainedConfig's setter
    llama = load_config(str(write_config({**GPT2, "model_type": "llama", "architectures": ["LlamaForCausalLM"]})))
    assert llama.get("num_hidden_layers") is None  # LlamaConfig has no attribute_map: n_layer means nothing to it
