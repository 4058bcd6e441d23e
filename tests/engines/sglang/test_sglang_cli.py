"""``kvdoctor roundtrip --engine sglang`` as a user runs it: header, exit codes, refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.schema_check import assert_valid

pytestmark = pytest.mark.sglang

DONE_WHEN = [
    "inkling-small",
    "--engine",
    "sglang",
    "--kv-cache-dtype",
    "mxfp8",
    "--disaggregation-mode",
    "decode",
    "--page-size",
    "128",
    "--device",
    "cpu",
]


def kvdoctor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "TRITON_INTERPRET": "1"}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=600, check=False, env=env
    )


def test_done_when_command_is_green_and_names_sglang() -> None:
    out = kvdoctor("roundtrip", *DONE_WHEN)
    assert out.returncode == 0, out.stderr
    from importlib.metadata import version

    lines = [line.split() for line in out.stdout.splitlines()]
    assert ["engine", "sglang", version("sglang"), "from"] == lines[2][:4]  # the key/value block's engine line
    assert "Round trip OK" in out.stdout
    assert any(line[:1] == ["stub"] and line[1].startswith("platform") for line in lines)
    assert out.stdout.splitlines()[-1].startswith("verdict: passed — ")


def test_fault_exits_1_with_inject_matched_in_json() -> None:
    out = kvdoctor("roundtrip", *DONE_WHEN, "--requests", "4", "--tokens", "64", "--inject", "drop-swa", "--json")
    assert out.returncode == 1, out.stderr
    report = assert_valid(out.stdout, "roundtrip")  # the published schema, engine_used branch
    assert report["verdict"] == "fail" and report["exit_code"] == 1 and report["rules_revision"] is None
    assert report["inject_matched"] is True and report["engine"]["name"] == "sglang"
    assert report["used"]["engine"] == "sglang" and report["used"]["pool_classes"]["kv_pool"]
    assert set(report["failing"]) == {"swa_kv", "swa_kv_scales"}


def test_sglang_refusal_is_exit_2_with_its_file_and_line() -> None:
    out = kvdoctor("roundtrip", *DONE_WHEN, "--gpu-arch", "sm90")
    assert out.returncode == 2
    assert "SM100" in out.stderr and "kv_cache_hook.py:" in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_model_sglang_does_not_know_is_exit_2(tmp_path) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "no_such_model_type",
                "architectures": ["NoSuchForCausalLM"],
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 2,
            }
        )
    )
    out = kvdoctor("roundtrip", str(tmp_path), "--engine", "sglang", "--device", "cpu")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
