"""``kvdoctor drift``'s outputs as a contract: the JSON validates against the shipped schema and carries
the shared header (engine: the installed SGLang), JUnit is red exactly when the command exits 1, and
the human output reads whole at 80 columns, piped, under NO_COLOR, ending with one verdict line.

The first tests feed the CLI a typed result (no SGLang needed: they run in the main suite); the last
ones (marker ``sglang``) run a small slice of the real matrix against the installed SGLang.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor.cli.app import app
from kvdoctor.core.drift_result import DriftReport, SglangCaseResult
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.sglang.inspect_result import FieldDrift
from kvdoctor.core.sglang.rules import RULES_REVISION
from kvdoctor.engines.sglang import drift as drift_mod
from tests.schema_check import assert_valid

NARROW = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
LONG_PATH = "/opt/" + "very-long-directory-name/" * 4 + "sglang/__init__.py"


def report(*, drifting: bool) -> DriftReport:
    cells = [
        SglangCaseResult("llama-3.1-8b", "colocated", ("--max-total-tokens", "65536"), 40),
        SglangCaseResult(
            "inkling-small",
            "decode+mxfp8+fa4",
            ("--disaggregation-mode", "decode"),
            55,
            [
                FieldDrift("retraction_backup", "cpu_tensor", None),
                FieldDrift("kv_pool", ["SWAKVPool", "x"], "[bold]MHATokenToKVPool"),
            ]
            if drifting
            else [],
            kvdoctor_refusal=None,
            sglang_refusal="SGLang says [red]no[/red]" if drifting else None,
            seconds=1.23456,
        ),
    ]
    return DriftReport(EngineRef("sglang", "0.5.23", LONG_PATH), cells, 2.5, "sm100")


def invoke(monkeypatch: pytest.MonkeyPatch, result: DriftReport, *args: str):  # type: ignore[no-untyped-def]
    from kvdoctor.engines.sglang import _runtime

    monkeypatch.setattr(drift_mod, "run_drift", lambda *a, **k: result)
    monkeypatch.setattr(_runtime, "engine_info", lambda: result.engine)  # found installed before the work starts
    return CliRunner().invoke(app, ["drift", *args], env=NARROW, catch_exceptions=False)


def junit_red(path: Path) -> bool:
    return any(child.tag in ("failure", "error") for case in ET.parse(path).iter("testcase") for child in case)


def verdict_text(text: str) -> str:
    """From the one ``verdict:`` line to the end (a fold at 80 columns undone)."""
    lines = text.rstrip("\n").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("verdict:")]
    assert len(starts) == 1, text
    return " ".join(line.strip() for line in lines[starts[0] :])


@pytest.mark.parametrize("drifting", [False, True], ids=["agrees", "drifts"])
def test_json_is_valid_and_agrees_with_exit_code_and_junit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, drifting: bool
) -> None:
    junit = tmp_path / "junit.xml"
    run = invoke(monkeypatch, report(drifting=drifting), "--json", "--junit", str(junit))
    assert run.exit_code == (1 if drifting else 0), run.output
    doc = assert_valid(run.stdout, "drift")
    assert doc["verdict"] == ("fail" if drifting else "pass") and doc["exit_code"] == run.exit_code
    assert doc["engine"] == {"name": "sglang", "version": "0.5.23", "path": LONG_PATH}
    assert doc["rules_revision"] == RULES_REVISION
    # The keys drift always had, with their meaning.
    assert (doc["ok"], doc["cases"], doc["fields_compared"], doc["drifting_cases"]) == (not drifting, 2, 95, drifting)
    cell = doc["results"][1]
    assert (
        cell["ok"] is (not drifting)
        and cell["seconds"] == 1.235
        and cell["argv"] == ["--disaggregation-mode", "decode"]
    )
    if drifting:  # raw values in JSON, as the engines answered them
        assert cell["drift"][0] == {"field": "retraction_backup", "kvdoctor": "cpu_tensor", "sglang": None}
        assert cell["drift"][1]["kvdoctor"] == ["SWAKVPool", "x"]
    assert junit_red(junit) == drifting


def test_human_output_reads_whole_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    run = invoke(monkeypatch, report(drifting=True))
    assert run.exit_code == 1
    out = run.stdout
    assert "…" not in out and "\x1b[" not in out, out
    assert LONG_PATH in out  # the engine's path whole, on one line
    assert all(len(line) <= 80 for line in out.splitlines() if line[:1] in "│┃┏┡└"), out
    assert "–" in out and "[bold]MHATokenToKVPool" in out  # None as a person writes it; markup shown literally
    assert "inkling-small · decode+mxfp8+fa4" in out and "retraction_backup" in out
    assert "SGLang refuses: SGLang says [red]no[/red]" in out
    assert verdict_text(out).startswith("verdict: FAILED — 2 cases, 95 fields compared, 1 drifting")
    assert "inkling-small · decode+mxfp8+fa4" in verdict_text(out)


def test_no_drift_ends_with_a_passed_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    run = invoke(monkeypatch, report(drifting=False))
    assert run.exit_code == 0, run.output
    assert verdict_text(run.stdout) == "verdict: passed — 2 cases, 95 fields compared, 0 drifting, 2.5 s"


# -- against the installed SGLang --------------------------------------------------------------------

SLICE = ("drift", "--fixture", "llama-3.1-8b", "--case", "colocated", "--case", "decode")


def kvdoctor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **NARROW, "TRITON_INTERPRET": "1"}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=900, check=False, env=env
    )


@pytest.mark.sglang
def test_real_slice_json_validates_against_the_schema(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    done = kvdoctor(*SLICE, "--json", "--junit", str(junit))
    assert done.returncode in (0, 1), done.stderr
    doc = assert_valid(done.stdout, "drift")
    import sglang

    assert doc["engine"]["name"] == "sglang" and doc["engine"]["version"] == sglang.__version__
    assert doc["cases"] == 2 and doc["fields_compared"] > 20 and doc["exit_code"] == done.returncode
    assert doc["command_line"] == ["kvdoctor", *SLICE, "--json", "--junit", str(junit)]
    assert junit_red(junit) == (done.returncode == 1)


@pytest.mark.sglang
def test_real_slice_human_output_at_80_columns() -> None:
    done = kvdoctor(*SLICE)
    assert done.returncode in (0, 1), done.stderr
    assert "…" not in done.stdout and "\x1b[" not in done.stdout
    word = "passed" if done.returncode == 0 else "FAILED"
    assert verdict_text(done.stdout).startswith(f"verdict: {word} — 2 cases, ")
