"""The replayed bugs through the CLI, ``kvdoctor roundtrip MODEL --server vllm --engine vllm --inject FAULT``: the
loud one (swa-short-store, vllm#56701) is exit 3 with vLLM's own message on one line and nothing on stdout; the silent
ones' refusals: a model they cannot change is exit 2.

Runs in .venv-vllm/: each test is one ``.venv-vllm/bin/kvdoctor`` process; CI (``make test-vllm``) runs the loud one,
``make vllm-matrix`` the rest (test_vllm_replay_faults.py and test_vllm_window_hit.py drive every case in-process).
"""

from __future__ import annotations

import pytest

from tests.engines.vllm.test_vllm_roundtrip_cli import kvdoctor

pytestmark = pytest.mark.vllm

ENGINE = ["--server", "vllm", "--engine", "vllm"]


def test_swa_short_store_is_exit_3_with_vllm_s_message() -> None:
    out = kvdoctor("gemma-3-12b", *ENGINE, "--tokens", "2048", "--inject", "swa-short-store", "--json")
    assert (out.returncode, out.stdout) == (3, ""), out.stdout
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("kvdoctor: error: vLLM's CPU offloading manager cannot serve the sliding-window hit")
    assert "v1/kv_offload/cpu/manager.py:231-232): Chunk b'kvdoctor-chunk-63" in line and "not found in cache" in line


@pytest.mark.matrix
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["llama-3.1-8b", "--inject", "null-source"],
            "--inject null-source: no KV-cache group of this launch line holds Mamba state (the fault stores the "
            "null block in place of a Mamba group's block; try nemotron-h-8b or granite-4.0-h-small)",
        ),
        (
            ["llama-3.1-8b", "--kv-cache-dtype", "fp8", "--inject", "mis-stride"],
            "--inject mis-stride: no group of this launch line carries in-page scales "
            "(try --kv-cache-dtype fp8_per_token_head, int8_per_token_head or int4_per_token_head)",
        ),
        (
            ["gemma-3-12b", "--inject", "swa-short-store"],
            "--inject swa-short-store needs a request past its sliding window's retained interval: raise --tokens "
            "to at least 1058",
        ),
    ],
)
def test_a_replay_that_cannot_apply_is_exit_2(args: list[str], line: str) -> None:
    out = kvdoctor(*args[:1], *ENGINE, *args[1:], "--json")
    assert (out.returncode, out.stdout) == (2, ""), out.stdout
    assert out.stderr.strip() == f"kvdoctor: error: {line}"
