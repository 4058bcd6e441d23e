"""Outside text in the reports a person reads: the GitHub step summary renders a model name, a message or a path as
the text it is (never as HTML or Markdown), and ``explain()`` names a failed error-hazard gate for what it found
(``no-error-hazards: KVD014...`` read as "no error hazards")."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.core.config import bundled_fixtures
from kvdoctor.report import github, verdicts

HOSTILE = "<img src=x onerror=alert(1)>"
MODEL = f"a|b `code` *strong* [link](javascript:x) ~~gone~~ _it_ & {HOSTILE}"


def _no_markup(markdown: str) -> None:
    """No raw HTML tag that outside text could have opened (kvdoctor's own are details/summary only)."""
    tags = re.findall(r"<\s*/?\s*([A-Za-z][\w-]*)", markdown)
    assert set(tags) <= {"details", "summary"}, tags
    assert "<img" not in markdown


def test_text_renders_outside_text_as_text() -> None:
    out = github.text(MODEL + "\nverdict: passed")
    assert "\n" not in out and "<" not in out
    for raw in ("|", "`", "*", "[", "]", "~"):  # each one escaped where it stands
        assert out.count("\\" + raw) == MODEL.count(raw), raw
    assert "\\_it\\_" in out and "&amp;" in out and "&lt;img" in out
    assert github.text("conv_state full_kv_scales") == "conv_state full_kv_scales"  # intraword: left as written


def test_the_summary_escapes_the_title_every_cell_and_the_details_heading() -> None:
    rows = [github.Row(MODEL, HOSTILE, "a|b", "failed"), github.Row("conv_state", "1 of 2 bytes differ", "0", "passed")]
    md = github.summary_markdown(f"kvdoctor roundtrip {MODEL}", f"**FAILED** — {HOSTILE}", rows, {HOSTILE: HOSTILE})
    _no_markup(md.replace("```text\n" + HOSTILE, "```text\n"))  # inside the fenced block it is shown as code
    table = [line for line in md.splitlines() if line.startswith("| ")]
    for line in table:  # a `|` in a cell cannot add a column: 4 cells, each bounded by an unescaped pipe
        assert len(re.findall(r"(?<!\\)\|", line)) == 5, line
    assert "| conv_state | 1 of 2 bytes differ | 0 | ✅ pass |" in md
    assert "**FAILED** — &lt;img" in md  # the status line keeps kvdoctor's bold, neutralises the tag


def test_an_error_summary_escapes_its_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    verdicts.forget()
    with pytest.raises(InputError), verdicts.errors_published("kvdoctor.x", f"kvdoctor x {HOSTILE}", junit_path=None):
        raise InputError(f"{HOSTILE}: no such model")
    verdicts.forget()
    text = summary.read_text()
    assert "**ERROR** (exit 2): &lt;img src=x onerror=alert(1)>: no such model" in text
    _no_markup(text)


def test_inspect_s_summary_through_the_cli_with_a_hostile_model_directory(tmp_path: Path) -> None:
    """End to end: a model directory whose name is HTML and Markdown, its summary written by ``kvdoctor inspect``."""
    model = tmp_path / "m|`x`*y*[z](u)" / HOSTILE.replace("/", "")
    model.mkdir(parents=True)
    shutil.copy(bundled_fixtures()["lfm2-1.2b"], model / "config.json")
    summary = tmp_path / "summary.md"
    env = {"PATH": "/usr/bin:/bin", "GITHUB_STEP_SUMMARY": str(summary), "COLUMNS": "120", "NO_COLOR": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "kvdoctor", "inspect", str(model)], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    text = summary.read_text()
    assert text.startswith("### kvdoctor inspect ") and "&lt;img src=x onerror=alert(1)>" in text
    assert "m\\|\\`x\\`\\*y\\*\\[z\\](u)" in text
    _no_markup(text)


def test_explain_names_a_failed_error_hazard_gate_for_what_it_found() -> None:
    from kvdoctor import api

    flags = ["--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode"]
    flags += ["--disaggregation-decode-retraction-backup", "host_pool"]
    report = api.inspect("inkling-small", server_args=flags, strict=True)
    lines = report.explain().splitlines()
    assert lines[0].startswith("verdict: FAILED — 2 error hazards (--strict)")
    assert lines[-1] == "error hazards (--strict): KVD014-SGLANG-REFUSES, KVD001-SSM-ON-HOST-POOL"
    assert not [line for line in lines if line.startswith("no-error-hazards")]
    assert "no-error-hazards" in {c.name for c in report.junit_cases()}  # the JUnit case's name is a contract
    assert api.inspect("inkling-small", server_args=flags).explain().splitlines()[0].startswith("verdict: passed")
