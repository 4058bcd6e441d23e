"""Launches vLLM refuses at start-up are hazard KVD114, never a pass (issue 16, items 1 and 2).

``--tensor-parallel-size 3`` on Llama-3.1-8B used to report "2 heads" per layer (8 KV heads // 3) and pass;
vLLM refuses it (32 attention heads do not divide by 3). KV cache groups vLLM cannot plan were printed as
"vLLM refuses" beside ``verdict: passed``.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvdoctor.cli.app import app
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.analysis import analyze_vllm

REFUSES = "KVD114-VLLM-REFUSES"


def _refusals(model: str, *argv: str) -> list[tuple[str, str | None]]:
    return [(h.message, h.where) for h in analyze_vllm(model, list(argv)).hazards if h.code == REFUSES]


def test_tp_3_on_llama_is_refused_for_the_attention_and_the_kv_heads() -> None:
    found = _refusals("llama-3.1-8b", "--tensor-parallel-size", "3")
    assert found == [
        (
            'vLLM 0.33.0 refuses this launch at start-up: "Total number of attention heads (32) must be divisible '
            'by tensor parallel size (3)." (vllm/config/model.py:1557-1564 (ModelConfig.verify_with_parallel_config))',
            str(rules.TP_HEADS),
        ),
        (
            'vLLM 0.33.0 refuses this launch at start-up: "8 is not divisible by 3": the 8 KV heads split over '
            "--tensor-parallel-size 3 (vllm/model_executor/layers/linear.py:1064-1071 (QKVParallelLinear: divide))",
            str(rules.TP_KV_HEADS),
        ),
    ]


@pytest.mark.parametrize(
    ("model", "tp", "expected"),
    [
        ("llama-3.1-8b", "2", 0),
        ("llama-3.1-8b", "16", 0),  # 8 KV heads replicated over 16 ranks: 16 % 8 == 0
        ("llama-3.1-8b", "32", 0),
        ("llama-3.1-8b", "64", 1),  # 32 heads over 64 ranks
        ("deepseek-v3", "3", 1),  # MLA: one latent head, no KV split; 128 heads % 3
        ("deepseek-v3", "8", 0),
    ],
)
def test_the_heads_rule_and_its_neighbours(model: str, tp: str, expected: int) -> None:
    assert len(_refusals(model, "-tp", tp)) == expected


def test_kv_heads_alone_can_refuse() -> None:
    """24 attention heads divide by 6 but 4 KV heads cannot be replicated over 6 ranks (6 % 4)."""
    from kvdoctor.core.config import ModelConfig
    from kvdoctor.core.vllm.flags import parse_vllm_flags
    from kvdoctor.core.vllm.refusals import launch_refusals

    cfg = ModelConfig("cfg", {"model_type": "llama", "num_attention_heads": 24, "num_key_value_heads": 4}, {})
    cfg = ModelConfig("cfg", cfg.top, cfg.top)
    found = launch_refusals(cfg, parse_vllm_flags(["-tp", "6"]), mla=False, attention=True)
    assert [(r.message, r.where) for r in found] == [("6 is not divisible by 4", rules.TP_KV_HEADS)]
    assert launch_refusals(cfg, parse_vllm_flags(["-tp", "6"]), mla=True, attention=True) == ()


def test_kv_cache_groups_vllm_cannot_plan_are_a_refusal_hazard() -> None:
    a = analyze_vllm("qwen3-next-80b-a3b", ["--disable-hybrid-kv-cache-manager"])
    assert a.groups is None and a.refusal is not None
    (message, where) = _refusals("qwen3-next-80b-a3b", "--disable-hybrid-kv-cache-manager")[0]
    assert "refuses to plan the KV cache" in message and where == str(a.refusal_where)


def test_a_grouping_refusal_is_an_internal_signal_not_an_error_of_the_tree() -> None:
    # It never reaches the CLI (the analysis turns it into KVD114's refusal); the error tree imports no core.
    from kvdoctor import _exceptions
    from kvdoctor.core.vllm.grouping import GroupingRefused

    assert not issubclass(GroupingRefused, _exceptions.KvdoctorError)
    assert not hasattr(_exceptions, "GroupingRefused")


runner = CliRunner()


@pytest.mark.parametrize(
    "argv",
    [
        ["llama-3.1-8b", "--tensor-parallel-size", "3"],
        ["qwen3-next-80b-a3b", "--disable-hybrid-kv-cache-manager"],
    ],
)
def test_a_launch_vllm_refuses_never_passes(argv: list[str]) -> None:
    out = runner.invoke(app, ["inspect", *argv[:1], "--server", "vllm", "--json", *argv[1:]])
    assert out.exit_code == 0, out.stderr
    report = json.loads(out.stdout)
    assert REFUSES in {h["code"] for h in report["hazards"]}
    assert report["verdict"] != "pass" and report["warnings"]
    strict = runner.invoke(app, ["inspect", *argv[:1], "--server", "vllm", "--strict", *argv[1:]])
    assert strict.exit_code == 1 and REFUSES in strict.stdout and "verdict: passed" not in strict.stdout
