"""kvdoctor's vLLM rule model (no vLLM, no torch): specs, groups, connectors, hazards, flags, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from kvdoctor._exceptions import FlagError, UnknownModelError
from kvdoctor.cli.app import app
from kvdoctor.core import registry
from kvdoctor.core.vllm import rules
from kvdoctor.core.vllm._generated.server_flags import VLLM_SERVER_FLAGS, VLLM_SWITCHES
from kvdoctor.core.vllm.analysis import VllmAnalysis, analyze_vllm
from kvdoctor.core.vllm.flags import parse_vllm_flags, parse_vllm_launch_line

LMCACHE = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'
NIXL = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


def groups(a: VllmAnalysis) -> list[tuple[str, int]]:
    assert a.groups is not None
    return [(g.kind.value, len(g.layer_names)) for g in a.groups]


def codes(a: VllmAnalysis) -> set[str]:
    return {h.code for h in a.hazards}


def statuses(a: VllmAnalysis) -> list[tuple[str, str]]:
    return [(r.kind, r.status.value) for r in a.connector.rows]


# --- specs and groups, per fixture (tests/engines/vllm holds vLLM's own get_kv_cache_groups to the same) ---


def test_qwen3_next_gdn_groups_and_hybrid_block_size() -> None:
    a = analyze_vllm("qwen3-next-80b-a3b", [])
    assert groups(a) == [("MambaSpec", 12)] * 3 + [("FullAttentionSpec", 12)]
    # 2 KV heads x (256 + 256) x 2 B = 2048 B/token; GDN state 3x8192 + 16x128x128 bf16 = 1097728 B.
    assert a.specs.block_size == 544 and a.specs.mamba_page_padded_from == 1_097_728
    assert {g.spec.page_size_bytes for g in a.groups or ()} == {544 * 2048}


def test_nemotron_h_mamba2_groups_pad_the_last_group() -> None:
    a = analyze_vllm("nemotron-h-8b", [])
    assert groups(a) == [("MambaSpec", 4)] * 6 + [("MambaSpec", 3), ("FullAttentionSpec", 4)]
    assert a.groups is not None and a.groups[6].padding_layers == 1
    mamba = next(s for s in a.specs.layers.values() if s.kind.value == "MambaSpec")
    assert mamba.dtypes == ("bfloat16", "float32")  # NemotronH's SSM cache defaults to float32


def test_sliding_window_models() -> None:
    assert groups(analyze_vllm("gpt-oss-20b", [])) == [("SlidingWindowSpec", 12), ("FullAttentionSpec", 12)]
    assert groups(analyze_vllm("gemma-3-12b", [])) == [("SlidingWindowSpec", 8)] * 5 + [("FullAttentionSpec", 8)]


def test_mla_one_group_latent_page() -> None:
    a = analyze_vllm("deepseek-v3", [])
    assert groups(a) == [("MLAAttentionSpec", 61)]
    assert a.groups is not None and a.groups[0].spec.page_size_bytes == 16 * 576 * 2


def test_tensor_parallel_shards_state() -> None:
    one, four = analyze_vllm("qwen3-next-80b-a3b", []), analyze_vllm("qwen3-next-80b-a3b", ["-tp", "4"])
    m1 = next(s for s in one.specs.layers.values() if s.kind.value == "MambaSpec")
    m4 = next(s for s in four.specs.layers.values() if s.kind.value == "MambaSpec")
    assert m4.shapes == ((3, 2048), (8, 128, 128)) and m1.shapes == ((3, 8192), (32, 128, 128))


# --- connectors: the done-when of issue 12 ---


def test_offloading_connector_carries_mamba_and_full_attention() -> None:
    a = analyze_vllm("qwen3-next-80b-a3b", ["--kv-offloading-size", "8"])
    assert a.connector.name == "OffloadingConnector" and a.hybrid.enabled
    assert statuses(a) == [("MambaSpec", "carried")] * 3 + [("FullAttentionSpec", "carried")]
    assert a.worst_severity == "info"


def test_lmcache_on_hybrid_model_reports_the_hybrid_manager_hazard() -> None:
    a = analyze_vllm("qwen3-next-80b-a3b", ["--kv-transfer-config", LMCACHE])
    assert not a.hybrid.enabled and a.groups is None
    assert "KVD101-CONNECTOR-NO-HYBRID" in codes(a) and a.worst_severity == "error"
    assert statuses(a) == [("all", "start-up failure")]


def test_lmcache_on_sliding_window_model_is_a_warning_and_groups_collapse() -> None:
    a = analyze_vllm("gpt-oss-20b", ["--kv-transfer-config", LMCACHE])
    assert groups(a) == [("FullAttentionSpec", 24)]
    assert [h.severity for h in a.hazards if h.code == "KVD101-CONNECTOR-NO-HYBRID"] == ["warning"]


def test_offloading_keeps_sliding_window_to_the_window() -> None:
    a = analyze_vllm("gpt-oss-20b", ["--kv-offloading-size", "4"])
    assert statuses(a) == [("SlidingWindowSpec", "carried (window only)"), ("FullAttentionSpec", "carried")]


def test_offloading_a_hybrid_model_without_prefix_caching_cannot_start() -> None:
    a = analyze_vllm("nemotron-h-8b", ["--kv-offloading-size", "4", "--no-enable-prefix-caching"])
    assert "KVD102-STATE-NOT-CARRIED" in codes(a)


def test_lmcache_backend_of_the_offloading_flags() -> None:
    a = analyze_vllm("qwen3-next-80b-a3b", ["--kv-offloading-size", "4", "--kv-offloading-backend", "lmcache"])
    assert a.connector.name == "LMCacheMPConnector" and "KVD101-CONNECTOR-NO-HYBRID" in codes(a)


def test_explicit_hybrid_manager_with_a_connector_without_it() -> None:
    a = analyze_vllm("gpt-oss-20b", ["--kv-transfer-config", LMCACHE, "--no-disable-hybrid-kv-cache-manager"])
    assert "KVD105-HYBRID-MANAGER-CONFLICT" in codes(a)


def test_nvfp4_block_scales_with_a_connector_are_unverified() -> None:
    a = analyze_vllm("gemma-3-12b", ["--kv-cache-dtype", "nvfp4", "--kv-transfer-config", NIXL])
    assert "KVD103-BLOCK-SCALES-UNVERIFIED" in codes(a)
    full = next(s for s in a.specs.layers.values() if s.kind.value == "FullAttentionSpec")
    assert full.state_content_bytes == 2 * (128 + 16)  # fp4 payload + fp8 scale per 16, K and V


def test_preemption_is_recompute_only() -> None:
    a = analyze_vllm("llama-3.1-8b", ["--no-enable-prefix-caching"])
    assert [h.severity for h in a.hazards if h.code == "KVD104-PREEMPTION-RECOMPUTES"] == ["warning"]
    assert a.report().preemption.mode == "recompute"


def test_hazard_codes_live_in_one_registry_and_do_not_collide() -> None:
    import kvdoctor.core.sglang.hazards  # noqa: F401  (registers SGLang's rules beside vLLM's)

    sglang, vllm = registry.rules_for("sglang"), registry.rules_for("vllm")
    assert sglang and vllm and not {r.code for r in sglang} & {r.code for r in vllm}
    assert set(registry.RULES) == {r.code for r in (*sglang, *vllm)}
    assert registry.checks_for("vllm") and registry.checks_for("sglang")
    assert not set(registry.checks_for("vllm")) & set(registry.checks_for("sglang"))


@pytest.mark.parametrize(
    ("imported", "absent"),
    [("kvdoctor.core.vllm.analysis", "sglang.hazards"), ("kvdoctor.core.sglang.analysis", "vllm")],
    ids=["vllm-without-sglang-hazards", "sglang-without-vllm"],
)
def test_one_servers_hazards_do_not_import_the_others(imported: str, absent: str) -> None:
    """The registry holds both servers' rules, yet neither server's analysis imports the other's hazards."""
    probe = f"import sys, {imported}; print(sorted(m for m in sys.modules if m.startswith('kvdoctor.core.{absent}')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


# --- flags and bad input (exit 2, one line) ---


def test_flags_from_a_pasted_vllm_serve_line() -> None:
    line = parse_vllm_launch_line(["vllm", "serve", "qwen3-next-80b-a3b", "--max_model_len", "8192", "--port=9"])
    assert line.model == "qwen3-next-80b-a3b" and line.launcher == "vllm serve"
    flags = parse_vllm_flags(line.server_argv)
    assert flags.not_modelled == ("--port 9",) and flags.max_model_len == 8192  # --max_model_len is modelled


def test_generated_flag_list_has_the_connector_flags() -> None:
    assert {"--kv-transfer-config", "--kv-offloading-size", "--kv-offloading-backend"} <= VLLM_SERVER_FLAGS
    assert {"--disable-hybrid-kv-cache-manager", "--no-enable-prefix-caching"} <= VLLM_SWITCHES


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--kv-transfer-config", "{not json"], "malformed JSON"),
        (["--kv-transfer-config", '{"kv_connector":"NoSuchConnector"}'], "unknown connector"),
        (["--kv-transfer-config", '{"kv_connector":"NixlConnector","bogus":1}'], "unknown field"),
        (["--kv-offlaoding-size", "4"], "did you mean --kv-offloading-size"),
        (["--kv-offloading-backend", "disk"], "invalid choice"),
    ],
)
def test_bad_flags_are_refused(argv: list[str], needle: str) -> None:
    with pytest.raises(FlagError, match=needle):
        parse_vllm_flags(argv)


def test_a_model_vllm_does_not_serve(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "x",
                "architectures": ["NoSuchForCausalLM"],
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "hidden_size": 8,
            }
        )
    )
    with pytest.raises(UnknownModelError, match=r"not one vLLM vllm==0\.33\.0 registers"):
        analyze_vllm(str(path), [])


def test_every_citation_names_the_wheel_version() -> None:
    assert rules.RULES_REVISION == "vllm==0.33.0"
    assert all(str(c.where).startswith("vllm/") for c in rules.CONNECTORS.values())


# --- CLI ---

runner = CliRunner()


def test_cli_json_done_when() -> None:
    out = runner.invoke(
        app, ["inspect", "qwen3-next-80b-a3b", "--server", "vllm", "--kv-offloading-size", "8", "--json"]
    )
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert [g["status"] for g in report["connector"]["groups"]] == ["carried"] * 4
    strict = runner.invoke(
        app, ["inspect", "qwen3-next-80b-a3b", "--server", "vllm", "--strict", "--kv-transfer-config", LMCACHE]
    )
    assert strict.exit_code == 1 and "KVD101-CONNECTOR-NO-HYBRID" in strict.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["--kv-transfer-config", "{"],
        ["--kv-transfer-config", '{"kv_connector":"Nope"}'],
        ["--kv-offlaoding-size", "4"],
    ],
)
def test_cli_bad_input_exits_2_with_one_line(argv: list[str]) -> None:
    out = runner.invoke(app, ["inspect", "qwen3-next-80b-a3b", "--server", "vllm", *argv])
    assert out.exit_code == 2
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("kvdoctor: error:")


def test_cli_engine_vllm_needs_server_vllm() -> None:
    out = runner.invoke(app, ["inspect", "qwen3-next-80b-a3b", "--engine", "vllm"])
    assert out.exit_code == 2 and "--server vllm" in out.stderr


def test_inspect_server_vllm_imports_no_torch() -> None:
    code = (
        "import sys; from kvdoctor.cli.app import app; "
        "app(['inspect', 'gpt-oss-20b', '--server', 'vllm', '--json'], standalone_mode=False); "
        "assert 'torch' not in sys.modules and 'vllm' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
