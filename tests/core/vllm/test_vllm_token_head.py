"""vLLM's per-token-head KV dtypes in kvdoctor's rule model (no vLLM, no torch): an fp32 scale per (token, head) and
side inside each page (rules.PER_TOKEN_HEAD). tests/engines/vllm holds vLLM's own
TritonAttentionBackend.customize_spec to the same bytes and shows a wrong rule drifting."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvdoctor._exceptions import FlagError
from kvdoctor.cli.app import app
from kvdoctor.core.vllm import matrix, rules
from kvdoctor.core.vllm.analysis import analyze_vllm
from kvdoctor.core.vllm.flags import parse_vllm_flags
from kvdoctor.core.vllm.specs import LayerSpec, SpecKind

PTH = "--kv-cache-dtype"
# llama-3.1-8b: 8 KV heads of 128; block 16. Content (hs_k + hs_v) * size + 2 fp32 scales; int4 halves the heads.
LLAMA = {
    "fp8_per_token_head": ("float8_e4m3fn", 2 * 128 + 8),
    "int8_per_token_head": ("int8", 2 * 128 + 8),
    "int4_per_token_head": ("uint8", 128 + 8),
}


def attention(model: str, *argv: str) -> list[LayerSpec]:
    return [s for s in analyze_vllm(model, list(argv)).specs.layers.values() if s.kind.is_attention]


@pytest.mark.parametrize(("mode", "dtype", "content"), [(m, d, c) for m, (d, c) in LLAMA.items()])
def test_llama_pages_carry_an_fp32_scale_per_token_head_and_side(mode: str, dtype: str, content: int) -> None:
    specs = attention("llama-3.1-8b", PTH, mode)
    assert len(specs) == 32
    for s in specs:
        assert (s.dtype, s.state_content_bytes, s.token_head_scales, s.block_scaled) == (dtype, content, True, False)
        assert s.page_size_bytes == 8 * 16 * content and s.bytes_per_token == 8 * content
        data = "int4 in (64+64) uint8" if mode == "int4_per_token_head" else dtype  # two nibbles a byte
        assert s.describe() == f"8 heads x (128+128) {data} + fp32 scale per token, head and side"
    plain = attention("llama-3.1-8b", PTH, "fp8")[0]
    assert not plain.token_head_scales and plain.state_content_bytes is None  # per-tensor fp8: no scale in the page


def test_the_per_token_head_dtypes_are_modelled_flags() -> None:
    for mode in rules.PER_TOKEN_HEAD:
        flags = parse_vllm_flags([PTH, mode])
        assert flags.kv_cache_dtype == mode and not flags.not_modelled


def test_sliding_and_hybrid_layers_take_the_same_cell() -> None:
    """gemma-3's sliding and full layers, and qwen3-next's attention beside its GDN state: every attention cell is
    its head sizes plus 8 scale bytes, and the hybrid block still grows until one page holds a Mamba state."""
    for s in attention("gemma-3-12b", PTH, "int8_per_token_head"):
        assert s.state_content_bytes == s.head_size + s.head_size_v + 8 and s.token_head_scales
    assert {s.kind for s in attention("gemma-3-12b", PTH, "int8_per_token_head")} == {SpecKind.SLIDING, SpecKind.FULL}
    a = analyze_vllm("qwen3-next-80b-a3b", [PTH, "fp8_per_token_head"])
    per_token = next(s for s in a.specs.layers.values() if s.kind is SpecKind.FULL).bytes_per_token
    assert per_token == 2 * (256 + 256 + 8)
    assert a.specs.mamba_page_padded_from is not None and a.specs.block_size * per_token >= 1_097_728
    assert a.groups is not None and len({g.spec.page_size_bytes for g in a.groups}) == 1


def test_an_mla_model_is_refused_naming_the_one_backend_that_lists_the_modes() -> None:
    with pytest.raises(FlagError, match=r"no MLA backend of vLLM 0\.33\.0 lists it \(only TRITON_ATTN does") as caught:
        analyze_vllm("deepseek-v3", [PTH, "fp8_per_token_head"])
    assert caught.value.exit_code == 2 and str(rules.PER_TOKEN_HEAD_BACKEND) in str(caught.value)


def test_inspect_shows_the_page_bytes() -> None:
    done = CliRunner().invoke(
        app,
        ["inspect", "llama-3.1-8b", "--server", "vllm", PTH, "fp8_per_token_head", "--json"],
        env={"COLUMNS": "200"},
    )
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert [(g["spec"], g["page_size_bytes"]) for g in doc["groups"]] == [("FullAttentionSpec", 33_792)]
    assert {s["detail"] for s in doc["layer_specs"]} == {
        "8 heads x (128+128) float8_e4m3fn + fp32 scale per token, head and side"
    }
    table = CliRunner().invoke(app, ["inspect", "llama-3.1-8b", "--server", "vllm", PTH, "int4_per_token_head"])
    assert table.exit_code == 0 and "page 17.0 KiB" in table.stdout


def test_the_drift_matrix_runs_each_per_token_head_dtype_alone_and_offloaded_except_on_mla() -> None:
    cases = matrix.token_head_cases()
    assert [c.name for c in cases] == [n for m in rules.PER_TOKEN_HEAD for n in (m, f"{m}+offload")]
    for case in cases:
        flags = parse_vllm_flags(case.argv)
        assert flags.kv_cache_dtype in rules.PER_TOKEN_HEAD and not flags.not_modelled and flags.prefix_caching
        assert (flags.transfer is not None) == case.name.endswith("+offload")
    names = set(matrix.case_names())
    assert {c.name for c in cases} <= names and len(names) == len(matrix.case_names())
    assert not {c.name for c in cases} & {c.name for c in matrix.cases_of("deepseek-v3")}
    llama = matrix.cases_of("llama-3.1-8b")
    assert llama == (*matrix.cases_for(False), *cases)
    assert matrix.cases_of("nemotron-h-8b") == (*matrix.cases_for(True), *cases)


def test_a_per_token_head_dtype_the_rules_lack_is_a_kvdoctor_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matrix, "TOKEN_HEAD_DTYPES", ("fp8_per_token_head", "fp4_per_token_head"))
    with pytest.raises(matrix.MatrixError, match="fp4_per_token_head is not a dtype kvdoctor's vLLM rules model"):
        matrix.token_head_cases()
