"""``kvdoctor drift --server vllm`` against the installed vLLM 0.33.0: every vLLM fixture x its launch matrix.

Runs in .venv-vllm/ (``make test-vllm``); skipped where vLLM is not installed. No mock of vLLM: every answer on
vLLM's side is the installed wheel's. The whole matrix runs once (module fixture); the tests that inject a
wrong rule run one cell each through the CLI.

Found by it (issue 20 point 4) and corrected: without prefix caching vLLM's
``MambaModelConfig.verify_and_update_config`` sets the Mamba block to ``max_model_len``
(model_executor/models/config.py:780-787) and ``MambaBase.get_kv_cache_spec`` builds every ``MambaSpec`` with
it (model_executor/layers/mamba/abstract.py:72-79). The rule model now derives ``max_model_len`` as vLLM's
``_get_and_verify_max_len`` does (core/vllm/model_len.py) and gives the Mamba groups that block; vLLM's side
derives it with its own code from its own config object (engines/vllm/cache_config.py), so the matrix is
expected to agree everywhere, and the rule forced off must drift again.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor.cli.app import app
from kvdoctor.core.config import load_config
from kvdoctor.core.drift_result import DriftReport
from kvdoctor.core.vllm import analysis as vllm_analysis
from kvdoctor.core.vllm import connectors, matrix
from kvdoctor.core.vllm import specs as vllm_specs
from kvdoctor.core.vllm.analysis import analyze_vllm
from kvdoctor.core.vllm.connectors import Status
from kvdoctor.core.vllm.refusals import VllmRefusal
from kvdoctor.core.vllm.specs import LayerSpec, SpecKind
from tests.schema_check import assert_valid

pytestmark = pytest.mark.vllm

NARROW = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
HYBRIDS = ("nemotron-h-8b", "qwen3-next-80b-a3b")
GROUPS = "KV cache groups"
LENGTH = "max model length"


@pytest.fixture(scope="module")
def whole() -> DriftReport:
    from kvdoctor.engines.vllm.drift import run_drift

    return run_drift()


def cli(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["drift", "--server", "vllm", *args], env=NARROW, catch_exceptions=False)


def test_every_vllm_fixture_runs_its_whole_matrix(whole: DriftReport) -> None:
    assert whole.engine.name == "vllm" and whole.engine.version == "0.33.0"
    expected = [(m, c.name) for m in matrix.vllm_fixtures() for c in matrix.cases_of(m)]
    token_head = [r for r in whole.results if r.case in {c.name for c in matrix.token_head_cases()}]
    assert len(token_head) == 6 * (len(matrix.vllm_fixtures()) - 1)  # every fixture but MLA deepseek-v3
    assert [(r.model, r.case) for r in whole.results] == expected
    assert all(r.fields > 0 for r in whole.results), [r for r in whole.results if not r.fields]
    assert not [r for r in whole.results if any(d.field in ("error", "refuses") for d in r.drift)]


def test_the_whole_matrix_agrees(whole: DriftReport) -> None:
    """Zero drift, every cell asking the max model length, and the hybrid cells without prefix caching (the 48
    that drifted before the rule) agreeing on Mamba groups whose block is max_model_len."""
    assert not whole.drifting, [(r.model, r.case, r.drift) for r in whole.drifting]
    assert whole.ok and whole.fields_compared == sum(r.fields for r in whole.results)
    no_prefix = [r for r in whole.results if r.model in HYBRIDS and "no-prefix" in r.case]
    assert len(no_prefix) == 2 * (24 + 2)  # the product's half without prefix caching, and two length lines
    for r in no_prefix:
        a = analyze_vllm(r.model, r.argv)
        assert a.specs.max_model_len is not None and a.specs.mamba_block_size == a.specs.max_model_len.tokens
        assert a.specs.mamba_block_size != a.specs.block_size


def test_the_mamba_block_rule_forced_off_drifts_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Teeth of the fix: the Mamba block back to the attention block without prefix caching, and vLLM's own
    groups (block max_model_len) turn the cell red on the groups field alone."""
    monkeypatch.setattr(vllm_specs, "_mamba_block", lambda flags, block, length: block)
    for fixture in HYBRIDS:
        done, cell, red = _one_cell(tmp_path, fixture, "no-prefix")
        assert done.exit_code == 1 and red == [f"{fixture} · no-prefix"]
        assert [d["field"] for d in cell["drift"]] == [GROUPS]
        block = load_config(fixture).text["max_position_embeddings"]
        theirs = [g for g in cell["drift"][0]["vllm"].split("; ") if g.startswith("MambaSpec")]
        assert theirs and all(g.startswith(f"MambaSpec block {block} ") for g in theirs), theirs


def test_a_wrong_max_model_len_is_drift_on_its_own_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Teeth of the length rule itself: ignoring --max-model-len makes the length and the Mamba groups drift."""
    real = vllm_specs.max_model_len
    monkeypatch.setattr(vllm_specs, "max_model_len", lambda cfg, asked=None, **k: real(cfg, None, **k))
    done, cell, _ = _one_cell(tmp_path, "nemotron-h-8b", "max-len-3k+no-prefix")
    assert done.exit_code == 1
    fields = {d["field"]: d for d in cell["drift"]}
    assert set(fields) == {LENGTH, GROUPS}
    assert (fields[LENGTH]["kvdoctor"], fields[LENGTH]["vllm"]) == ("8192", "3000")


def test_a_length_above_the_config_is_refused_by_both(whole: DriftReport) -> None:
    cells = [r for r in whole.results if r.case == "max-len-10M"]
    assert len(cells) == len(matrix.vllm_fixtures())
    for r in cells:
        assert r.ok and r.kvdoctor_refusal and r.kvdoctor_refusal.startswith("User-specified max_model_len (10485760)")
        assert r.vllm_refusal and "_get_and_verify_max_len raises ValueError: User-specified max_model_len" in (
            r.vllm_refusal
        )


CONFIGS = {  # llama-3.1-8b's config.json with these fields: several length keys, RoPE scaling, a Command-R length
    "smaller-key": {"max_position_embeddings": 32768, "n_positions": 16384, "seq_length": 65536},
    "linear": {"max_position_embeddings": 8192, "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
    "legacy-dynamic": {"max_position_embeddings": 8192, "rope_scaling": {"type": "dynamic", "factor": 2.0}},
    "yarn": {
        "max_position_embeddings": 32768,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192},
    },
    "model-max-length": {"max_position_embeddings": 8192, "model_max_length": 131072},
}


@pytest.mark.parametrize(
    "argv", [(), ("--max-model-len", "auto"), ("--max-model-len", "12k"), ("--max-model-len", "64K")]
)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_length_rule_is_vllms_own_derivation(tmp_path: Path, name: str, argv: tuple[str, ...]) -> None:
    """The rule model's max_model_len (or refusal) against vLLM's _get_and_verify_max_len on vLLM's own config."""
    from kvdoctor.engines.vllm import cache_config

    doc = {**dict(load_config("llama-3.1-8b").top), **CONFIGS[name]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    a = analyze_vllm(str(path), argv)
    ours, theirs = a.specs.max_model_len, cache_config.vllm_max_model_len(a)
    assert ours is not None
    assert (ours.tokens, ours.refusal is not None) == (theirs.tokens, theirs.refusal is not None), (ours, theirs)


def test_both_sides_refusing_alike_is_not_drift(whole: DriftReport) -> None:
    """A hybrid with the offloading connector and no prefix caching: the rule model's start-up failure and
    vLLM's own build_offloading_config assertion agree (the groups drift above is the only disagreement)."""
    cells = [r for r in whole.results if r.model in HYBRIDS and "offload+no-prefix" in r.case]
    assert cells
    for r in cells:
        assert r.kvdoctor_refusal and "--enable-prefix-caching" in r.kvdoctor_refusal
        assert r.vllm_refusal and r.vllm_refusal.startswith("build_offloading_config raises AssertionError")
        assert "OffloadingConnector per group" not in [d.field for d in r.drift]


def _one_cell(tmp_path: Path, fixture: str, case: str):  # type: ignore[no-untyped-def]
    """One cell through the CLI (``--json``), and the JUnit cases its result publishes that are red.

    The JUnit cases are read from the report: .venv-vllm has no junitparser (constraints/vllm.txt), so
    ``--junit`` itself is exercised in the main suite (tests/cli/test_drift_vllm.py)."""
    from kvdoctor.engines.vllm.drift import run_drift
    from kvdoctor.report import junit
    from kvdoctor.report.drift_report import Report

    done = cli("--fixture", fixture, "--case", case, "--json")
    assert done.stdout, (done.exit_code, done.stderr)
    doc = assert_valid(done.stdout, "drift")
    assert doc["exit_code"] == done.exit_code and doc["cases"] == 1
    cases = Report(run_drift([fixture], [case])).junit_cases()
    red = [c.name for c in cases if c.status != junit.PASSED]
    return done, doc["results"][0], red


def test_the_matrix_slice_agrees_through_the_cli(tmp_path: Path) -> None:
    done, cell, red = _one_cell(tmp_path, "gpt-oss-20b", "tp2+fp8+offload")
    assert done.exit_code == 0, done.stdout
    assert cell["ok"] and cell["fields"] > 10 and cell["vllm_refusal"] is None and not red


def test_an_injected_wrong_rule_is_drift_exit_1_naming_the_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Teeth: kvdoctor's model made wrong for one field (a sliding-window page 16 bytes too big) must drift."""
    right = LayerSpec.page_size_bytes.fget
    assert right is not None

    def wrong(self: LayerSpec) -> int:
        return right(self) + (16 if self.kind is SpecKind.SLIDING else 0)

    monkeypatch.setattr(LayerSpec, "page_size_bytes", property(wrong))
    done, cell, red = _one_cell(tmp_path, "gpt-oss-20b", "base")
    assert done.exit_code == 1, done.stdout
    assert (cell["model"], cell["case"], cell["ok"]) == ("gpt-oss-20b", "base", False)
    fields = [d["field"] for d in cell["drift"]]
    assert "model.layers.0.self_attn.attn page bytes" in fields  # gpt-oss layer 0 is sliding
    first = next(d for d in cell["drift"] if d["field"] == "model.layers.0.self_attn.attn page bytes")
    assert int(first["kvdoctor"]) == int(first["vllm"]) + 16
    assert red == ["gpt-oss-20b · base"]
    text = cli("--fixture", "gpt-oss-20b", "--case", "base")
    assert text.exit_code == 1 and "gpt-oss-20b · base" in text.stdout and "verdict: FAILED" in text.stdout


def test_only_vllm_refusing_is_drift_with_vllms_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule model made to miss the offloading refusal: vLLM's own assertion must turn the cell red."""
    real = connectors._offload_row

    def lenient(*args):  # type: ignore[no-untyped-def]
        row = real(*args)
        return dataclasses.replace(row, status=Status.CARRIED) if row.status is Status.REFUSED else row

    monkeypatch.setattr(connectors, "_offload_row", lenient)
    done, cell, _ = _one_cell(tmp_path, "qwen3-next-80b-a3b", "offload+no-prefix")
    assert done.exit_code == 1
    offload = next(d for d in cell["drift"] if d["field"] == "OffloadingConnector per group")
    assert "carried" in offload["kvdoctor"] and "start-up failure" in offload["vllm"]
    assert cell["kvdoctor_refusal"] is None and "need --enable-prefix-caching" in cell["vllm_refusal"]
    text = cli("--fixture", "qwen3-next-80b-a3b", "--case", "offload+no-prefix").stdout
    assert "vLLM refuses: build_offloading_config raises AssertionError" in text


def test_only_kvdoctor_refusing_is_drift_with_both_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule model made to refuse TP 2 for llama: vLLM starts it, so the cell drifts and says who refused."""
    invented = VllmRefusal("Total number of attention heads (32) must be divisible by tensor parallel size (2).", None)  # type: ignore[arg-type]
    monkeypatch.setattr(
        vllm_analysis, "launch_refusals", lambda cfg, flags, **k: (invented,) if flags.tensor_parallel_size == 2 else ()
    )
    done, cell, red = _one_cell(tmp_path, "llama-3.1-8b", "tp2")
    assert done.exit_code == 1 and red == ["llama-3.1-8b · tp2"]
    tp = next(d for d in cell["drift"] if d["field"] == "start-up refusals (tensor parallel)")
    assert tp["kvdoctor"] == invented.message and tp["vllm"] == "none"
    assert cell["kvdoctor_refusal"] == invented.message and cell["vllm_refusal"] is None
    text = cli("--fixture", "llama-3.1-8b", "--case", "tp2").stdout
    assert "kvdoctor refuses: Total number of attention heads (32)" in " ".join(text.split())


def test_json_of_the_whole_run_validates(whole: DriftReport) -> None:
    from kvdoctor.report import reportable
    from kvdoctor.report.drift_report import Report

    doc = json.loads(json.dumps(reportable.json_document(Report(whole)), default=str))
    assert_valid(doc, "drift")
    assert doc["exit_code"] == (0 if whole.ok else 1) and doc["fields_compared"] == whole.fields_compared
