"""vLLM 0.33's per-token-head KV dtypes against kvdoctor's rule (rules.PER_TOKEN_HEAD): vLLM's own attention backend
answers each cell's content bytes (``TritonAttentionBackend.customize_spec``), its own scale views say which bytes
of a page are scales (``TritonAttentionImpl._ensure_scale_caches``), and a wrong rule drifts.

Runs in .venv-vllm/ (``make test-vllm``); every ``vllm.*`` object here is the installed wheel's.
"""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import pytest

from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm.analysis import analyze_vllm

pytestmark = pytest.mark.vllm

MODES = tuple(rules.PER_TOKEN_HEAD)
MODELS = ("llama-3.1-8b", "gemma-3-12b", "gpt-oss-20b", "nemotron-h-8b", "qwen3-next-80b-a3b")
CONTENT = "content bytes per (token, head)"


def _beside(model: str, *argv: str):  # type: ignore[no-untyped-def]
    from kvdoctor.engines.vllm.inspect import beside

    analysis = analyze_vllm(model, list(argv))
    return analysis, beside(analysis)


def test_triton_is_the_one_backend_that_lists_the_per_token_head_dtypes() -> None:
    """The backend kvdoctor asks (engines/vllm/inspect.py TOKEN_HEAD_BACKEND) is the only one whose
    supported_kv_cache_dtypes names these modes, read from every backend module's source (most cannot be imported
    on this CPU: flashinfer, ROCm, XPU)."""
    import vllm
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend

    from kvdoctor.engines.vllm.inspect import TOKEN_HEAD_BACKEND

    assert set(MODES) <= set(TritonAttentionBackend.supported_kv_cache_dtypes)
    backends = Path(vllm.__file__).parent / "v1" / "attention" / "backends"
    listing = {p.name for p in backends.rglob("*.py") if any(f'"{m}"' in p.read_text(encoding="utf-8") for m in MODES)}
    assert listing == {"triton_attn.py"} and TOKEN_HEAD_BACKEND[0].endswith("triton_attn")


def vllms_per_token_head_dtypes() -> set[str]:
    """vLLM's own per-token-head KV dtypes: every ``CacheDType`` (config/cache.py) whose ``get_kv_quant_mode`` is
    per token and head."""
    from typing import get_args

    from vllm.config.cache import CacheDType
    from vllm.v1.kv_cache_interface import get_kv_quant_mode

    return {d for d in get_args(CacheDType) if get_kv_quant_mode(d).is_per_token_head}


def test_the_rule_model_knows_exactly_vllms_per_token_head_dtypes() -> None:
    """A per-token-head mode a later vLLM adds fails here (and so reaches the drift matrix, whose per-token-head
    lines are TOKEN_HEAD_DTYPES) rather than going unchecked."""
    from kvdoctor.core.vllm import matrix

    theirs = vllms_per_token_head_dtypes()
    assert theirs and set(rules.PER_TOKEN_HEAD) == theirs == set(matrix.TOKEN_HEAD_DTYPES)
    assert {c.name for c in matrix.token_head_cases()} == {n for d in theirs for n in (d, f"{d}+offload")}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", MODELS)
def test_vllms_backend_packs_each_cell_as_the_rule_says(model: str, mode: str) -> None:
    analysis, answers = _beside(model, "--kv-cache-dtype", mode)
    assert not answers.drifts, answers.drifts
    asked = [c for c in answers.checks if c.question.endswith(CONTENT)]
    layers = [s for s in analysis.specs.layers.values() if s.kind.is_attention]
    assert len(asked) == len(layers) > 0
    assert {c.vllm for c in asked} == {str(s.state_content_bytes) for s in layers}


def test_vllms_spec_is_built_without_content_and_in_vllms_own_cache_dtype() -> None:
    """The content bytes on vLLM's side are its backend's answer, not the rule's passed through."""
    import torch

    from kvdoctor.engines.vllm.inspect import vllm_spec

    rule = next(iter(analyze_vllm("llama-3.1-8b", ["--kv-cache-dtype", "fp8_per_token_head"]).specs.layers.values()))
    theirs = vllm_spec(dataclasses.replace(rule, state_content_bytes=1), "fp8_per_token_head", None)
    assert theirs.state_content_bytes == 264 and theirs.dtype == torch.uint8  # STR_DTYPE_TO_TORCH_DTYPE
    assert theirs.kv_quant_mode.is_per_token_head and theirs.page_size_bytes == 8 * 16 * 264


def test_vllms_own_quant_mode_decides_its_side_not_the_rules_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule model that forgets the per-token-head modes (rules.PER_TOKEN_HEAD emptied) models fp8_per_token_head
    as plain fp8: a 32768 B page on llama. vLLM's side is switched by vLLM's own ``get_kv_quant_mode``, so vLLM's
    backend still packs its 33792 B page and both the page and the content bytes drift; the round trip, built from
    the same specs, still splits the scales out."""
    from kvdoctor.engines.vllm.roundtrip import _components, _specs_and_groups

    monkeypatch.setattr(rules, "PER_TOKEN_HEAD", {})
    analysis, answers = _beside("llama-3.1-8b", "--kv-cache-dtype", "fp8_per_token_head")
    layer = next(iter(analysis.specs.layers.values()))
    assert layer.page_size_bytes == 16 * 8 * 2 * 128 and not layer.token_head_scales
    drifting = [c for c in answers.drifts]
    pages = {(c.kvdoctor, c.vllm) for c in drifting if c.question.endswith("page bytes")}
    assert pages == {("32768", "33792")}, drifting
    assert {(c.kvdoctor, c.vllm) for c in drifting if c.question.endswith(CONTENT)} == {("None", "264")}
    _, groups, _ = _specs_and_groups("llama-3.1-8b", ["--kv-cache-dtype", "fp8_per_token_head"], 1)
    assert [n for n, _ in _components(groups[0].kv_cache_spec)] == ["k", "k_scale", "v", "v_scale"]


@pytest.mark.parametrize(
    ("patch", "model", "mode"),
    [
        ("PER_TOKEN_HEAD_SCALE_BYTES", "llama-3.1-8b", "fp8_per_token_head"),  # one fp16 scale, not fp32
        ("PER_TOKEN_HEAD", "llama-3.1-8b", "int4_per_token_head"),  # int4 read as a byte a value
        # the hybrid's attention pages and groups; its block size is kvdoctor's input on both sides (vLLM's
        # _align_hybrid_block_size needs the built model's layers: _find_non_ssm_backends, platforms/interface.py:679)
        ("PER_TOKEN_HEAD_SCALE_BYTES", "nemotron-h-8b", "int8_per_token_head"),
    ],
)
def test_a_wrong_content_rule_drifts(monkeypatch: pytest.MonkeyPatch, patch: str, model: str, mode: str) -> None:
    if patch == "PER_TOKEN_HEAD_SCALE_BYTES":
        monkeypatch.setattr(rules, patch, 2)
    else:
        monkeypatch.setitem(rules.PER_TOKEN_HEAD, mode, rules.TokenHeadMode("uint8", 1))
    _, answers = _beside(model, "--kv-cache-dtype", mode)
    drifting = [c.question for c in answers.drifts]
    assert any(q.endswith(CONTENT) for q in drifting) and any(q.endswith("page bytes") for q in drifting), drifting


def test_the_drift_matrix_cell_turns_red_under_a_wrong_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvdoctor.engines.vllm.drift import run_drift

    clean = run_drift(["llama-3.1-8b"], ["fp8_per_token_head", "fp8_per_token_head+offload"])
    assert clean.ok and not clean.drifting and len(clean.results) == 2
    monkeypatch.setattr(rules, "PER_TOKEN_HEAD_SCALE_BYTES", 8)
    red = run_drift(["llama-3.1-8b"], ["fp8_per_token_head"])
    (cell,) = red.results
    fields = {d.field for d in cell.drift}
    assert not red.ok and any(f.endswith(CONTENT) for f in fields) and "KV cache groups" in fields


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout", ["LBHNC", "LBNHC"])
def test_the_round_trips_split_is_vllms_own_scale_views(mode: str, layout: str) -> None:
    """Every byte of a page labelled through vLLM's own views (``_pth_key_value_caches`` for K and V data,
    ``_ensure_scale_caches`` for the scales), in both head/slot orders vLLM lays pages out in: the round trip's
    ``k``/``k_scale``/``v``/``v_scale`` byte sets are exactly those."""
    import torch
    from vllm.v1.attention.backends.triton_attn import TritonAttentionImpl

    from kvdoctor.engines.vllm.roundtrip import _components, _specs_and_groups

    _, groups, _ = _specs_and_groups("llama-3.1-8b", ["--kv-cache-dtype", mode], 1)
    spec = groups[0].kv_cache_spec
    heads, slots, content, blocks = spec.num_kv_heads, spec.block_size, spec.state_content_bytes, 3
    raw = torch.zeros(blocks, spec.page_size_bytes, dtype=torch.uint8)
    if layout == "LBHNC":
        cache = raw.view(blocks, heads, slots, content)
    else:
        cache = raw.view(blocks, slots, heads, content).transpose(1, 2)
    impl = types.SimpleNamespace(
        _k_scale_cache=None, _v_scale_cache=None, _kv_quant_mode=spec.kv_quant_mode, fp8_dtype=torch.float8_e4m3fn
    )
    impl._ensure_scale_caches = lambda kv: TritonAttentionImpl._ensure_scale_caches(impl, kv)
    key, value = TritonAttentionImpl._pth_key_value_caches(impl, cache)
    data = content // 2 - rules.PER_TOKEN_HEAD_SCALE_BYTES
    key.view(torch.uint8)[..., :data].fill_(1)
    value.view(torch.uint8)[..., :data].fill_(2)
    impl._k_scale_cache.view(torch.int32).fill_(0x03030303)
    impl._v_scale_cache.view(torch.int32).fill_(0x04040404)
    labels = {"k": 1, "v": 2, "k_scale": 3, "v_scale": 4}
    parts = _components(spec)
    assert [n for n, _ in parts] == ["k", "k_scale", "v", "v_scale"]
    for name, part in parts:
        mask = torch.from_numpy(part.mask(spec.page_size_bytes))
        assert bool((raw[:, mask] == labels[name]).all()) and int(mask.sum()) == part.size, name
    assert sum(p.size for _, p in parts) == spec.page_size_bytes and bool((raw != 0).all())
