"""A checkpoint build writes nothing to stderr (the output contract: kvdoctor's own lines only), and a model type
transformers does not know is refused naming the nearest few, not all ~400."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.consistency import checkpoint
from kvdoctor.consistency.shrink import shrink

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "models" / "llama-3.1-8b.json"
BUILD = """
import json, sys
from pathlib import Path
from kvdoctor.consistency import checkpoint
checkpoint.build(json.loads(sys.argv[1]), 0, Path(sys.argv[2]))
"""


def test_nearest_names_a_few_never_the_whole_list() -> None:
    known = [f"model{i}" for i in range(400)] + ["llama", "mllama", "llama4"]
    assert checkpoint.nearest("lama", known) == "; nearest: llama, mllama, llama4"
    assert checkpoint.nearest("zzzzzz", known) == ""


@pytest.mark.server
def test_a_fresh_checkpoint_build_writes_nothing_to_stderr(tmp_path: Path) -> None:
    """Measured: transformers' `torch_dtype` deprecation warning and its `Writing model shards` tqdm bar. A child
    process: transformers warns once per process, so an earlier test in this one would hide it."""
    pytest.importorskip("transformers")
    config = shrink(json.loads(FIXTURE.read_text()))
    done = subprocess.run(
        [sys.executable, "-c", BUILD, json.dumps(config), str(tmp_path / "ckpt")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert (tmp_path / "ckpt" / "model.safetensors").is_file()


@pytest.mark.server
def test_an_unknown_model_type_names_the_nearest_few() -> None:
    pytest.importorskip("transformers")
    with pytest.raises(InputError) as refused:
        checkpoint.hf_config_of({"model_type": "lama", "vocab_size": 1024})
    message = str(refused.value)
    assert "nearest: llama" in message and len(message) < 200 and "\n" not in message
