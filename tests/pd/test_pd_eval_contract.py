"""pd-eval's outputs as a contract: the JSON validates against the shipped schema, carries the shared
header, and agrees with the exit code, JUnit and the step summary; the human output reads whole at
80 columns, piped, under NO_COLOR, and ends with one verdict line.

Real runs against the stand-in servers (a pass, a red gate, a deployment that fails); every test that
starts processes proves, via ``no_leftovers``, that none survives it.
"""

from __future__ import annotations

import io
import os
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kvdoctor.cli.app import app
from kvdoctor.core.sglang.rules import RULES_REVISION
from kvdoctor.deploy import client, plan, presets
from kvdoctor.deploy.metrics import RetractionCount
from kvdoctor.pd import gate, publish
from kvdoctor.pd import report as pd_report
from kvdoctor.pd.result import PdEvalResult, Score
from kvdoctor.report.envelope import SCHEMA_VERSION
from tests.pd.helpers import GSM8K, KVDOCTOR, ROOT, invoke, pd_args, result_json, run_dir
from tests.schema_check import assert_valid

NARROW = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}


def kvdoctor(args: list[str]) -> subprocess.CompletedProcess[str]:
    """The real console entry point in its own process, piped, at 80 columns, without colour."""
    env = {**os.environ, **NARROW}
    env.pop("FORCE_COLOR", None)
    return subprocess.run([*KVDOCTOR, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)


def junit_red(path: Path) -> bool:
    """Whether the JUnit file holds a failure or an error (what a CI dashboard shows red)."""
    return any(child.tag in ("failure", "error") for case in ET.parse(path).iter("testcase") for child in case)


def verdict_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("verdict:")]


def verdict_text(text: str) -> str:
    """The verdict line as a person reads it: from ``verdict:`` to the end, a fold at 80 columns undone."""
    lines = text.rstrip("\n").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("verdict:")]
    assert len(starts) == 1, text  # one verdict, and nothing after it but its own continuation
    return " ".join(line.strip() for line in lines[starts[0] :])


def assert_readable(text: str) -> None:
    """Nothing cut with an ellipsis, no escape sequence, every table row within 80 columns, one verdict
    line and it is the last line."""
    assert "…" not in text, text
    assert "\x1b[" not in text, text
    table = [line for line in text.splitlines() if line[:1] in "│┃┏┡└╭╰┌"]
    assert table and all(len(line) <= 80 for line in table), text
    assert verdict_text(text).startswith("verdict: "), text


# -- real runs against the stand-ins ----------------------------------------------------------------


@pytest.mark.usefixtures("no_leftovers")
def test_passing_run_json_is_valid_and_carries_the_header(tmp_path: Path) -> None:
    out, junit = tmp_path / "out", tmp_path / "junit.xml"
    args = pd_args(out, "--json", "--junit", str(junit))
    done = kvdoctor(args)
    assert done.returncode == 0, done.stderr
    doc = assert_valid(done.stdout, "pd-eval")
    assert doc == assert_valid(result_json(out), "pd-eval")  # --json and result.json: one object
    assert (doc["verdict"], doc["exit_code"], doc["passed"], doc["exit_reason"]) == ("pass", 0, True, "passed")
    assert doc["schema_version"] == SCHEMA_VERSION and doc["command"] == "pd-eval"
    assert doc["engine"] == {"name": "sglang", "version": "0.5.23-standin", "path": None}
    assert doc["rules_revision"] == RULES_REVISION
    assert doc["command_line"] == ["kvdoctor", *args]
    assert doc["warnings"] == [] and doc["dry_run"] is False
    assert not junit_red(junit)
    # --json: stdout is the JSON alone (its verdict is the status line's word), stderr the progress; no verdict line
    assert verdict_lines(done.stderr) == [] and "…" not in done.stderr


@pytest.mark.usefixtures("no_leftovers")
def test_red_gate_reads_whole_at_80_columns_and_agrees_everywhere(tmp_path: Path, knobs: Callable[..., None]) -> None:
    knobs(ACCURACY="0.5")
    out, junit = tmp_path / "out", tmp_path / "junit.xml"
    done = kvdoctor(pd_args(out, "--threshold", "0.8", "--junit", str(junit)))
    assert done.returncode == 1, done.stderr
    doc = assert_valid(result_json(out), "pd-eval")
    assert (doc["verdict"], doc["exit_code"], doc["exit_reason"]) == ("fail", 1, "accuracy_below_threshold")
    assert junit_red(junit)
    assert_readable(done.stdout)
    assert verdict_text(done.stdout).startswith(f"verdict: FAILED — accuracy {doc['accuracy']:.3f} < threshold")
    assert f"  run_dir: {run_dir(out)}\n" in done.stdout  # the whole path on one line, never folded
    assert "stand-in/model" in done.stdout and "≥ 0.800" in done.stdout
    assert "GSM8K eval through the router" in done.stdout  # the progress names the step that ran


@pytest.mark.usefixtures("no_leftovers")
def test_deployment_failure_is_an_error_with_valid_json(tmp_path: Path, knobs: Callable[..., None]) -> None:
    knobs(PREFILL_EXIT_AT_START="7")
    out, junit = tmp_path / "out", tmp_path / "junit.xml"
    run = invoke(pd_args(out, "--json", "--junit", str(junit)))
    assert run.exit_code == 3, run.output
    doc = assert_valid(run.stdout, "pd-eval")
    assert doc == result_json(out)
    assert (doc["verdict"], doc["exit_code"], doc["exit_reason"]) == ("error", 3, "server_exited")
    assert doc["engine"]["version"] is None and doc["accuracy"] is None  # no server ever answered
    statuses = {c.get("name"): [x.tag for x in c] for c in ET.parse(junit).iter("testcase")}
    assert statuses == {"deployment": ["error"], "accuracy": ["error"], "retraction": ["error"]}
    assert verdict_lines(run.stderr) == []  # --json: no verdict line; the one line of a run without a verdict
    assert "kvdoctor: error: server_exited: prefill exited with code 7" in run.stderr.splitlines()


@pytest.mark.usefixtures("no_leftovers")
def test_a_skipped_retraction_guard_is_a_warning_not_a_clean_pass(tmp_path: Path, knobs: Callable[..., None]) -> None:
    knobs(DECODE_RETRACT_EVERY="0")
    out, junit = tmp_path / "out", tmp_path / "junit.xml"
    run = invoke(pd_args(out, "--allow-no-retraction", "--json", "--junit", str(junit)))
    assert run.exit_code == 0, run.output
    doc = assert_valid(run.stdout, "pd-eval")
    assert doc["verdict"] == "warn" and doc["passed"] is True
    assert len(doc["warnings"]) == 1 and "no retraction happened" in doc["warnings"][0]
    assert not junit_red(junit)
    assert verdict_lines(run.stderr) == []  # --json: the JSON's verdict (warn) is the status line


def test_dry_run_json_is_valid() -> None:
    run = invoke(["pd-eval", "m", "--dry-run", "--json", "--data-path", str(GSM8K)])
    assert run.exit_code == 0, run.output
    doc = assert_valid(run.stdout, "pd-eval")
    assert doc["dry_run"] is True and doc["verdict"] == "pass" and doc["exit_code"] == 0
    assert [s["role"] for s in doc["launch_plan"]["steps"]] == ["prefill", "decode", "router"]


# -- every output agrees with the exit code -----------------------------------------------------------


def _result(exit_code: int, reason: str, *, scored: bool, gates_pass: bool = True) -> PdEvalResult:
    result = PdEvalResult(
        model="m", preset="generic", threshold=0.8, num_shots=5, num_questions=10, data_sha256=None, data_source=None
    )
    result.exit_code, result.exit_reason, result.passed = exit_code, reason, exit_code == 0
    result.plan = plan.external("m", router_url="http://r:1", decode_url="http://d:2", prefill_url=None).to_dict()
    result.message = reason
    if scored:
        accuracy = 0.9 if gates_pass else 0.5
        result.score = Score(accuracy, 0.0, 10, 100, 2.0)
        result.gates = [gate.accuracy(accuracy, 0.8), gate.retraction(RetractionCount(3, "metrics"), allow_none=False)]
    return result


@pytest.mark.parametrize(
    "result",
    [
        _result(0, "passed", scored=True),
        _result(1, "accuracy_below_threshold", scored=True, gates_pass=False),
        _result(3, "server_exited", scored=False),
        # The gates passed, then a process survived teardown: exit 3, so JUnit must not be all green.
        _result(3, "processes_survived", scored=True),
        _result(130, "interrupted", scored=False),
    ],
    ids=lambda r: r.exit_reason,
)
def test_junit_and_step_summary_are_red_exactly_when_the_exit_code_is(result: PdEvalResult) -> None:
    red = result.exit_code != 0
    cases = pd_report.junit_cases(result)
    assert any(c.status in ("failed", "error") for c in cases) == red
    headline = pd_report.step_summary(result).split("\n")[2]  # the status line, under the title
    word = {0: "**passed", 1: "**FAILED**"}.get(result.exit_code, "**ERROR**")
    assert headline.startswith(word), headline  # the JSON verdict's word, never FAILED for a deployment error
    doc = assert_valid(pd_report.document(result), "pd-eval")
    assert doc["verdict"] == ("pass" if not red else "fail" if result.exit_code == 1 else "error")


def test_a_report_that_cannot_be_written_says_exit_2_in_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = _result(0, "passed", scored=True)
    finished = publish.finish(
        result, blocker / "out", junit_path=None, json_out=True, console=Console(file=io.StringIO()), env={}
    )
    doc = assert_valid(capsys.readouterr().out, "pd-eval")
    assert finished.exit_code == doc["exit_code"] == 2 and finished.verdict == doc["verdict"] == "error"


# -- Typer does the CLI work ------------------------------------------------------------------------


def test_presets_and_apis_are_choices_listed_in_help_with_their_defaults() -> None:
    assert {p.value for p in presets.PresetName} == set(presets.PRESETS)
    assert tuple(a.value for a in client.Api) == client.APIS
    run = CliRunner().invoke(app, ["pd-eval", "--help"], env={"COLUMNS": "250"})
    assert run.exit_code == 0, run.output
    text = " ".join(run.output.split())
    assert "inkling-mxfp8" in text and "completions|generate" in text
    for default in ("5, or the preset's", "200, or the preset's", "0.80, or the preset's", "128, or the preset's"):
        assert default in text, default


@pytest.mark.parametrize(("option", "value"), [("--preset", "nope"), ("--api", "chat")])
def test_a_bad_choice_is_one_line_before_anything_runs(tmp_path: Path, option: str, value: str) -> None:
    done = kvdoctor(["pd-eval", "m", option, value, "--output-dir", str(tmp_path / "out")])
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"kvdoctor: error: Invalid value for '{option}'")
    assert not (tmp_path / "out").exists()  # refused before the run directory, data or ports
