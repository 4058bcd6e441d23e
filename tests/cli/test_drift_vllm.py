"""``kvdoctor drift --server vllm`` in the main suite (no vLLM here): its option errors are one exit-2 line found
before any work, and its outputs, fed a typed result, keep drift's contract (the schema with the vLLM keys, JUnit
red exactly when it exits 1, the human output at 80 columns naming vLLM's side).
"""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor._exceptions import InputError
from kvdoctor.cli.app import app
from kvdoctor.core.drift_result import DriftReport, VllmCaseResult, VllmFieldDrift
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.vllm.rules import RULES_REVISION
from kvdoctor.engines.vllm import drift as vllm_drift
from tests.schema_check import assert_valid, errors

NARROW = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
REFUSAL = "build_offloading_config raises AssertionError: tokens_per_block=262144 not divisible [bold]x"


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["drift", "--server", "vllm", *args], env=NARROW, catch_exceptions=False)


def one_error_line(result) -> str:  # type: ignore[no-untyped-def]
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and result.stdout == "", (result.stdout, result.stderr)
    assert lines[0].startswith("kvdoctor: error: ") and "Traceback" not in result.stderr
    return lines[0]


# -- option errors (exit 2, one line, before vLLM is looked for) ------------------------------------


@pytest.mark.skipif(HAVE_VLLM, reason="vLLM is installed here: the refusal is for where it is not")
def test_without_vllm_installed_it_is_exit_2_in_one_line_naming_the_install() -> None:
    line = one_error_line(run())
    assert line == (
        "kvdoctor: error: drift --server vllm: vLLM is not installed here; install it with: "
        "make vllm-env (then run .venv-vllm/bin/kvdoctor)"
    )


def test_gpu_arch_is_refused_for_vllm_rather_than_ignored() -> None:
    line = one_error_line(run("--gpu-arch", "sm90"))
    assert "--gpu-arch" in line and "drift --server vllm" in line


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--fixture", "no-such-model"), "unknown vLLM fixture no-such-model; choose from deepseek-v3,"),
        (("--fixture", "lfm2-1.2b"), "--fixture lfm2-1.2b is not a vLLM fixture: "),
        (("--case", "tp3"), "unknown vLLM launch case tp3; choose from base,"),
        (
            ("--fixture", "llama-3.1-8b", "--case", "mamba-align"),
            "--case mamba-align applies to none of llama-3.1-8b",
        ),
    ],
    ids=["unknown-fixture", "not-a-vllm-fixture", "unknown-case", "case-for-no-fixture"],
)
def test_selection_errors_are_one_line_before_any_work(
    monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], words: str
) -> None:
    asked: list[str] = []
    monkeypatch.setattr(vllm_drift.rt, "engine_info", lambda *a: asked.append("vllm") or EngineRef("vllm", "x", None))
    line = one_error_line(run(*args))
    assert words in line, line
    assert not asked  # refused before vLLM was looked for


def test_a_selection_that_runs_no_cell_is_refused_not_passed() -> None:
    """Teeth: without the empty-selection check, a mamba case on a model without Mamba layers ran 0 cells and passed."""
    with pytest.raises(InputError, match="applies to none of qwen3-8b"):
        vllm_drift.cells(["qwen3-8b"], ["mamba-none"])
    assert [c.name for _, c in vllm_drift.cells(["qwen3-next-80b-a3b"], ["mamba-none"])] == ["mamba-none"]


# -- outputs from a typed result ------------------------------------------------------------------


def report(*, drifting: bool) -> DriftReport:
    cells = [
        VllmCaseResult("llama-3.1-8b", "base", ("--enable-prefix-caching",), 40),
        VllmCaseResult(
            "qwen3-next-80b-a3b",
            "offload+no-prefix",
            ("--kv-offloading-size", "8", "--no-enable-prefix-caching"),
            55,
            [VllmFieldDrift("OffloadingConnector per group", "['carried']", "['start-up failure']")]
            if drifting
            else [],
            kvdoctor_refusal=None,
            vllm_refusal=REFUSAL,
            seconds=0.4567,
        ),
    ]
    return DriftReport(EngineRef("vllm", "0.33.0", "/opt/vllm"), cells, 3.25, None)


def invoke(monkeypatch: pytest.MonkeyPatch, result: DriftReport, *args: str):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(vllm_drift, "run_drift", lambda *a, **k: result)
    return run(*args)


@pytest.mark.parametrize("drifting", [False, True], ids=["agrees", "drifts"])
def test_json_validates_with_vllms_keys_and_agrees_with_exit_code_and_junit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, drifting: bool
) -> None:
    junit = tmp_path / "junit.xml"
    done = invoke(monkeypatch, report(drifting=drifting), "--json", "--junit", str(junit))
    assert done.exit_code == (1 if drifting else 0), done.output
    doc = assert_valid(done.stdout, "drift")
    assert doc["engine"] == {"name": "vllm", "version": "0.33.0", "path": "/opt/vllm"}
    assert doc["rules_revision"] == RULES_REVISION and doc["gpu_arch"] is None
    assert (doc["cases"], doc["fields_compared"], doc["drifting_cases"]) == (2, 95, int(drifting))
    cell = doc["results"][1]
    assert cell["vllm_refusal"] == REFUSAL and "sglang_refusal" not in cell and cell["seconds"] == 0.457
    if drifting:
        assert cell["drift"] == [
            {"field": "OffloadingConnector per group", "kvdoctor": "['carried']", "vllm": "['start-up failure']"}
        ]
    failed = [c.get("name") for c in ET.parse(junit).iter("testcase") if list(c)]
    assert failed == (["qwen3-next-80b-a3b · offload+no-prefix"] if drifting else [])


def test_the_schema_holds_each_server_to_its_own_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Teeth for the schema's if/then: a vLLM row with SGLang's key (or without its own) is invalid."""
    doc = assert_valid(invoke(monkeypatch, report(drifting=True), "--json").stdout, "drift")
    row = doc["results"][1]
    row["sglang_refusal"] = row.pop("vllm_refusal")
    assert errors(doc, "drift")
    row["vllm_refusal"] = row.pop("sglang_refusal")
    row["drift"][0]["sglang"] = row["drift"][0].pop("vllm")
    assert errors(doc, "drift")


def test_human_output_names_vllms_side_and_both_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    done = invoke(monkeypatch, report(drifting=True))
    assert done.exit_code == 1
    out = done.stdout
    assert out.startswith("kvdoctor rules vs vLLM 0.33.0 (/opt/vllm)\n"), out  # no GPU: vLLM is told none
    assert "…" not in out and "\x1b[" not in out
    assert all(len(line) <= 80 for line in out.splitlines() if line[:1] in "│┃┏┡└"), out
    assert "┃ field" in out and "vLLM" in out.splitlines()[3] and "SGLang" not in out
    assert "vLLM refuses: build_offloading_config raises AssertionError" in out
    assert "[bold]x" in " ".join(out.split())  # the server's words shown literally, never as markup
    last = " ".join(line.strip() for line in out[out.index("verdict:") :].splitlines())
    assert (
        last
        == "verdict: FAILED — 2 cases, 95 fields compared, 1 drifting, 3.2 s: qwen3-next-80b-a3b · offload+no-prefix"
    )


def test_no_drift_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    done = invoke(monkeypatch, report(drifting=False))
    assert done.exit_code == 0, done.output
    assert done.stdout.rstrip().splitlines()[-1] == "verdict: passed — 2 cases, 95 fields compared, 0 drifting, 3.2 s"
