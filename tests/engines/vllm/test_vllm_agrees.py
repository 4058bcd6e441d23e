"""vLLM's own answers (its spec classes, ``get_kv_cache_groups``, connector classes) against the rule model.

Runs in .venv-vllm/ (``make test-vllm``); skipped where vLLM is not installed. No mock of vLLM: every
``vllm.*`` object here is the installed wheel's.
"""

from __future__ import annotations

import pytest

from kvdoctor.core.vllm.analysis import analyze_vllm
from kvdoctor.core.vllm.specs import SpecKind

pytestmark = pytest.mark.vllm

FIXTURES = ["qwen3-next-80b-a3b", "nemotron-h-8b", "gpt-oss-20b", "gemma-3-12b", "deepseek-v3", "llama-3.1-8b"]
LMCACHE = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'
NIXL = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


def _beside(model: str, *argv: str):  # type: ignore[no-untyped-def]
    from kvdoctor.engines.vllm.inspect import beside

    analysis = analyze_vllm(model, list(argv))
    return analysis, beside(analysis)


@pytest.mark.parametrize("model", FIXTURES)
@pytest.mark.parametrize("argv", [(), ("-tp", "2"), ("--kv-cache-dtype", "fp8")])
def test_vllm_grouping_agrees_on_every_fixture(model: str, argv: tuple[str, ...]) -> None:
    analysis, answers = _beside(model, *argv)
    assert answers.info.version == "0.33.0"
    assert not answers.drifts, answers.drifts
    assert answers.groups is not None and len(answers.groups) == len(analysis.groups or ())


@pytest.mark.parametrize(
    ("model", "argv"),
    [
        ("qwen3-next-80b-a3b", ("--kv-offloading-size", "8")),
        ("nemotron-h-8b", ("--kv-offloading-size", "8")),
        ("gpt-oss-20b", ("--kv-offloading-size", "8")),
        ("gemma-3-12b", ("--kv-cache-dtype", "nvfp4", "--kv-transfer-config", NIXL)),
        ("qwen3-next-80b-a3b", ("--kv-transfer-config", NIXL)),
    ],
)
def test_connectors_agree(model: str, argv: tuple[str, ...]) -> None:
    _, answers = _beside(model, *argv)
    assert not answers.drifts, answers.drifts
    assert any("SupportsHMA" in c.question for c in answers.checks)


def test_lmcache_turns_the_hybrid_manager_off_and_vllm_refuses_the_hybrid_model() -> None:
    analysis, answers = _beside("qwen3-next-80b-a3b", "--kv-transfer-config", LMCACHE)
    assert analysis.groups is None and answers.groups is None
    assert not answers.drifts, answers.drifts


def test_lmcache_on_sliding_window_collapses_to_one_full_group_in_vllm_too() -> None:
    _, answers = _beside("gpt-oss-20b", "--kv-transfer-config", LMCACHE)
    assert not answers.drifts and answers.groups is not None
    assert [g["spec"] for g in answers.groups] == ["FullAttentionSpec"]


def test_vllm_offloading_config_window_sizes_and_ring_buffer() -> None:
    """vLLM's own offloading rules: Mamba one state, sliding window in chunks, full None; rings not cacheable."""
    import torch
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import get_sliding_window_size_in_chunks
    from vllm.v1.kv_cache_interface import CircularBufferSpec, FullAttentionSpec, MambaSpec, SlidingWindowSpec

    full = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16)
    swa = SlidingWindowSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=torch.bfloat16, sliding_window=128)
    mamba = MambaSpec(shapes=((3, 8),), dtypes=(torch.bfloat16,), block_size=16)
    ring = CircularBufferSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.bfloat16)
    assert get_sliding_window_size_in_chunks(full, 16) is None
    assert get_sliding_window_size_in_chunks(swa, 16) == 8
    assert get_sliding_window_size_in_chunks(mamba, 16) == 1
    assert not ring.prefix_cacheable and full.prefix_cacheable and mamba.prefix_cacheable


def test_mamba_state_matches_vllms_calculators() -> None:
    analysis, answers = _beside("nemotron-h-8b")
    mamba = [c for c in answers.checks if "Mamba state" in c.question]
    assert mamba and all(c.agree for c in mamba)
    assert next(s for s in analysis.specs.layers.values() if s.kind is SpecKind.MAMBA).dtypes[1] == "float32"


def test_cli_engine_vllm_shows_vllm_beside_and_exits_0() -> None:
    import json

    from typer.testing import CliRunner

    from kvdoctor.cli.app import app

    out = CliRunner().invoke(
        app,
        [
            "inspect",
            "qwen3-next-80b-a3b",
            "--server",
            "vllm",
            "--engine",
            "vllm",
            "--kv-offloading-size",
            "8",
            "--json",
            "--strict",
        ],
    )
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["vllm"]["available"] and all(c["agree"] for c in report["vllm"]["checks"])
