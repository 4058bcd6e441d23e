"""Every exit path of ``kvdoctor pd-eval`` against the stand-in SGLang server and router.

Each test runs the real command (launch plan → supervisor → client → guard → reports) and, via
``no_leftovers``, proves that no process it started survives it.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from kvdoctor.pd import run as run_mod
from tests.pd.helpers import invoke, pd_args, result_json, run_dir

pytestmark = pytest.mark.usefixtures("no_leftovers")


def test_pass_writes_every_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step output\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out, junit = tmp_path / "out", tmp_path / "junit.xml"
    run = invoke(pd_args(out, "--json", "--junit", str(junit)))
    assert run.exit_code == 0, run.output
    data = json.loads(run.stdout)
    assert data == result_json(out)
    assert data["passed"] is True and data["exit_reason"] == "passed"
    assert data["accuracy"] == 1.0 and data["invalid_rate"] == 0.0
    assert data["num_questions"] == 24 and data["num_shots"] == 5
    assert data["retractions"] > 0 and data["retraction_source"] == "metrics"
    assert data["data_sha256"] == "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
    assert data["server_versions"] == {"prefill": "0.5.23-standin", "decode": "0.5.23-standin"}
    assert [s["role"] for s in data["launch_plan"]["steps"]] == ["prefill", "decode", "router"]
    cases = {c.get("name"): c for c in ET.parse(junit).iter("testcase")}
    assert set(cases) == {"deployment", "accuracy", "retraction"}
    assert all(len(c) == 0 or c[0].tag == "system-out" for c in cases.values())
    rows = pd.read_parquet(run_dir(out) / "questions.parquet")
    assert len(rows) == 24 and rows["line"].min() == 5  # the 5 shots are never scored
    assert pd.read_csv(run_dir(out) / "questions.csv")["correct"].all()
    text = summary.read_text()
    assert text.startswith("earlier step output\n") and "### kvdoctor pd-eval" in text


def test_accuracy_below_threshold_fails_the_gate(tmp_path: Path, knobs: Callable[..., None]) -> None:
    knobs(ACCURACY="0.5")
    run = invoke(pd_args(tmp_path, "--threshold", "0.8"))
    data = result_json(tmp_path)
    assert run.exit_code == 1
    assert data["exit_reason"] == "accuracy_below_threshold"
    assert 0.4 <= data["accuracy"] <= 0.6  # stand-in answers half right, spread over lines
    assert data["invalid_rate"] == 0.0


def test_unanswered_questions_count_as_invalid(tmp_path: Path, knobs: Callable[..., None]) -> None:
    knobs(ANSWER="none")
    run = invoke(pd_args(tmp_path, "--threshold", "0"))
    data = result_json(tmp_path)
    assert run.exit_code == 0
    assert data["accuracy"] == 0.0 and data["invalid_rate"] == 1.0


def test_no_retraction_fails_with_pool_too_large(tmp_path: Path, knobs: Callable[..., None]) -> None:
    knobs(DECODE_RETRACT_EVERY="0")
    run = invoke(pd_args(tmp_path))
    data = result_json(tmp_path)
    assert run.exit_code == 1
    assert data["exit_reason"] == "no_retraction" and data["retractions"] == 0
    assert "too large to guard anything" in data["message"]


def test_allow_no_retraction_skips_the_guard(tmp_path: Path, knobs: Callable[..., None]) -> None:
    knobs(DECODE_RETRACT_EVERY="0")
    junit = tmp_path / "junit.xml"
    run = invoke(pd_args(tmp_path, "--allow-no-retraction", "--junit", str(junit)))
    assert run.exit_code == 0
    retraction = next(c for c in ET.parse(junit).iter("testcase") if c.get("name") == "retraction")
    assert retraction[0].tag == "skipped"


def test_log_fallback_counts_each_retraction_once_across_tp_ranks(tmp_path: Path, knobs: Callable[..., None]) -> None:
    # The Inkling preset launches decode without --enable-metrics (as the reference test does),
    # so the guard reads the decode log; at TP 2 every retraction is logged by TP0 and TP1.
    knobs(DECODE_RETRACT_EVERY="1")
    args = pd_args(tmp_path, "--preset", "inkling-mxfp8", "--json")
    run = invoke(args)
    data = json.loads(run.stdout)
    assert run.exit_code == 0, run.output
    assert data["retraction_source"] == "log"
    assert data["retractions"] == 24  # one per scored question (the smoke request came before)
    assert data["num_shots"] == 5  # an explicit option overrides the preset's 10


def test_generate_api(tmp_path: Path) -> None:
    run = invoke(pd_args(tmp_path, "--api", "generate", "--json"))
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["api"] == "generate"


def test_slow_start_is_waited_for(tmp_path: Path, knobs: Callable[..., None]) -> None:
    knobs(DECODE_UNHEALTHY_PROBES="5", PREFILL_UNHEALTHY_PROBES="3")
    assert invoke(pd_args(tmp_path)).exit_code == 0


def test_server_exiting_at_start_stops_the_run(tmp_path: Path, knobs: Callable[..., None]) -> None:
    knobs(PREFILL_EXIT_AT_START="7")
    run = invoke(pd_args(tmp_path))
    data = result_json(tmp_path)
    assert run.exit_code == 3
    assert data["exit_reason"] == "server_exited"
    assert "prefill exited with code 7" in data["message"]
    assert "exiting at start as asked" in data["message"]  # the log tail is in the report
    assert not (run_dir(tmp_path) / "decode.log").exists()  # nothing after a failed step starts


def test_server_never_healthy_times_out(tmp_path: Path, knobs: Callable[..., None]) -> None:
    # On the FIRST role: whatever the load, nothing else can happen before the deadline.
    knobs(PREFILL_NEVER_HEALTHY="1")
    run = invoke(pd_args(tmp_path, "--timeout", "3"))
    data = result_json(tmp_path)
    assert run.exit_code == 3
    assert data["exit_reason"] == "server_unhealthy"
    assert "prefill never became healthy" in data["message"]
    assert not (run_dir(tmp_path) / "decode.log").exists()


def test_mini_lb_readiness_is_its_fanned_out_health_generate(tmp_path: Path, knobs: Callable[..., None]) -> None:
    # mini_lb's /health is 200 whatever the workers do: waiting on it would pass this router.
    knobs(ROUTER_NEVER_HEALTHY="1")
    run = invoke(pd_args(tmp_path, "--mini-lb", "--timeout", "3"))
    data = result_json(tmp_path)
    assert run.exit_code == 3 and data["exit_reason"] == "server_unhealthy"
    assert "router never became healthy" in data["message"] and "/health_generate" in data["message"]


def test_crash_mid_eval_stops_at_once(tmp_path: Path, knobs: Callable[..., None]) -> None:
    knobs(DECODE_CRASH_AFTER="6")
    junit = tmp_path / "junit.xml"
    run = invoke(pd_args(tmp_path, "--junit", str(junit)))
    data = result_json(tmp_path)
    assert run.exit_code == 3
    assert data["exit_reason"] == "server_exited"
    assert "decode exited with code 3" in data["message"]
    assert "crashing after 6 requests" in data["message"]
    kinds = {c.get("name"): c[0].tag for c in ET.parse(junit).iter("testcase")}
    assert kinds == {"deployment": "error", "accuracy": "error", "retraction": "error"}


def test_router_crash_mid_eval(tmp_path: Path, knobs: Callable[..., None]) -> None:
    knobs(ROUTER_CRASH_AFTER="4")
    run = invoke(pd_args(tmp_path))
    assert run.exit_code == 3
    assert "router exited" in result_json(tmp_path)["message"]


def test_unknown_flag_in_plan_is_refused_before_the_servers_start(tmp_path: Path) -> None:
    # A flag SGLang does not have never reaches a launch line: kvdoctor refuses it (exit 2) before the
    # stand-in (whose argparse would refuse it too, exit 3) is ever started; no run directory is made.
    run = invoke([*pd_args(tmp_path), "--", "--not-an-sglang-flag", "1"])
    assert run.exit_code == 2, run.output
    assert "unknown option --not-an-sglang-flag" in run.stderr
    assert not list(tmp_path.glob("run-*"))


def test_extra_server_flags_reach_both_roles(tmp_path: Path) -> None:
    run = invoke([*pd_args(tmp_path, "--json"), "--", "--kv-cache-dtype", "fp8_e4m3"])
    assert run.exit_code == 0, run.output
    steps = json.loads(run.stdout)["launch_plan"]["steps"]
    assert [("--kv-cache-dtype" in s["argv"]) for s in steps] == [True, True, False]


@pytest.mark.parametrize("kind", ["html", "list", "null-choices"])
def test_router_answering_200_garbage_fails_the_deployment(
    tmp_path: Path, knobs: Callable[..., None], kind: str
) -> None:
    knobs(ROUTER_MALFORMED=kind)
    run = invoke(pd_args(tmp_path))
    data = result_json(tmp_path)
    assert run.exit_code == 3, run.output
    assert data["exit_reason"] == "deployment_failed"
    assert "cannot serve: malformed reply" in data["message"]


def test_garbage_mid_eval_costs_questions_not_the_run(tmp_path: Path, knobs: Callable[..., None]) -> None:
    knobs(ROUTER_MALFORMED="null-choices", ROUTER_MALFORMED_AFTER="13")  # smoke + 12 questions
    run = invoke(pd_args(tmp_path, "--parallel", "1"))
    data = result_json(tmp_path)
    assert run.exit_code == 1 and data["exit_reason"] == "accuracy_below_threshold"
    assert data["accuracy"] == 0.5
    rows = pd.read_csv(run_dir(tmp_path) / "questions.csv")
    assert rows["error"].notna().sum() == 12
    assert rows["error"].dropna().str.startswith("malformed reply").all()


def test_unexpected_exception_is_exit_3_with_a_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object) -> object:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(run_mod, "_server_info", broken)
    junit = tmp_path / "junit.xml"
    run = invoke(pd_args(tmp_path / "out", "--junit", str(junit)))
    data = result_json(tmp_path / "out")
    assert run.exit_code == 3, run.output
    assert data["exit_reason"] == "internal_error" and "Too many open files" in data["message"]
    assert {c.get("name"): c[0].tag for c in ET.parse(junit).iter("testcase")}["deployment"] == "error"


@pytest.mark.parametrize("where", ["junit", "output-dir", "step-summary"])
def test_unwritable_report_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out, extra = tmp_path / "out", []
    if where == "junit":
        extra = ["--junit", str(blocker / "junit.xml")]
    elif where == "output-dir":
        out = blocker / "out"
    else:
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))  # a directory
    run = invoke(pd_args(out, *extra))
    assert run.exit_code == 2, run.output
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.output
    assert not (tmp_path / "out").exists()  # nothing was launched or written


def test_a_run_never_deletes_or_overwrites_files_it_did_not_write(tmp_path: Path, knobs: Callable[..., None]) -> None:
    """Files already in --output-dir (an earlier run's, or anyone's) are kept byte for byte; each
    run writes into a fresh run directory of its own and reports it."""
    names = [
        "questions.csv",
        "questions.parquet",
        "decode.log",
        "prefill.log",
        "router.log",
        "result.json",
        "notes.txt",
    ]
    for name in names:
        (tmp_path / name).write_text(f"someone else's {name}")
    knobs(PREFILL_EXIT_AT_START="7")
    first = invoke(pd_args(tmp_path, "--json"))
    assert first.exit_code == 3
    assert json.loads(first.stdout)["run_dir"] == str(run_dir(tmp_path))
    assert result_json(tmp_path)["exit_reason"] == "server_exited"
    for name in names:
        assert (tmp_path / name).read_text() == f"someone else's {name}"
    assert sorted(p.name for p in run_dir(tmp_path).iterdir()) == ["prefill.log", "result.json"]
    assert invoke(pd_args(tmp_path)).exit_code == 3  # a second run: a second directory
    runs = sorted(tmp_path.glob("run-*"))
    assert len(runs) == 2 and all((r / "result.json").is_file() for r in runs)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("run-")) == sorted(names)
