"""``roundtrip``'s outputs as a CI and a person rely on them: the JSON against its published schema,
the keys users already parse, the verdict agreeing everywhere, option choices checked before torch
loads, outside strings printed literally, and the progress display naming the step that runs."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor.cli.app import app
from tests.schema_check import assert_valid, errors

INKLING = ["inkling-small", "--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode"]
SMALL = ["--device", "cpu", "--requests", "4", "--tokens", "48", "--layers", "1", "--heads", "1"]
TRITON = ["--attention-backend", "triton"]  # MXFP8 at page 1: a launch-line error SGLang refuses (KVD006)

# The keys roundtrip --json carried before the report header existed: users parse them, so they stay.
TOP_KEYS = [
    "ok",
    "device",
    "kv_cache_dtype",
    "backend",
    "injected",
    "failing",
    "expected_red",
    "inject_matched",
    "hazards",
    "components",
    "used",
    "elapsed_s",
    "engine",
]
ROW_KEYS = [
    "name",
    "bytes",
    "mismatched_bytes",
    "equal",
    "copies_out",
    "copies_in",
    "bytes_out",
    "bytes_in",
    "ledger_ok",
    "first_request",
    "first_plane",
    "first_layer",
    "first_position",
    "first_slot",
    "ok",
]
MODEL_USED_KEYS = [
    "model",
    "kv_pool",
    "token_index_space",
    "cpu_copy_carries_mamba",
    "caller_backs_up_mamba",
    "requests",
    "retracted",
    "max_tokens",
    "page_size",
    "seed",
    "reductions",
    "full_layers",
    "swa_layers",
    "recurrent_layers",
    "kv_heads",
    "sliding_window",
    "scale_layout",
    "chunk",
    "pool_bytes",
    "restored_into_new_slots",
    "max_slot_runs",
]


def kvdoctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS")}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**base, **(env or {})},
    )


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


# ---- the JSON and its schema ------------------------------------------------------------------


def test_default_run_json_is_valid_and_keeps_every_key_users_parse() -> None:
    out = kvdoctor("roundtrip", *INKLING, "--device", "cpu", "--json")
    assert out.returncode == 0, out.stderr
    report = assert_valid(out.stdout, "roundtrip")
    assert report["verdict"] == "pass" and report["exit_code"] == 0 and report["ok"] is True
    assert report["command_line"] == ["kvdoctor", "roundtrip", *INKLING, "--device", "cpu", "--json"]
    assert report["engine"]["name"] == "kvdoctor" and report["rules_revision"]
    assert set(TOP_KEYS) <= set(report)
    assert all(list(row) == ROW_KEYS for row in report["components"])
    assert list(report["used"])[: len(MODEL_USED_KEYS)] == MODEL_USED_KEYS
    assert report["used"]["reductions"] == "none (full model shapes)"
    assert report["used"]["reduction_limits"] == {"layers": None, "heads": None}


def test_injected_fault_json_is_valid_fail_with_exit_code_1() -> None:
    out = invoke("roundtrip", *INKLING, *SMALL, "--inject", "missing-mamba", "--json")
    assert out.exit_code == 1, out.output
    report = assert_valid(out.stdout, "roundtrip")
    assert report["verdict"] == "fail" and report["exit_code"] == 1
    assert report["failing"] == ["conv_state"] and report["inject_matched"] is True
    assert report["used"]["reductions"] == "layers<=1, heads<=1"  # the prose stays beside its structure
    assert report["used"]["reduction_limits"] == {"layers": 1, "heads": 1}


def test_launch_line_errors_make_a_passing_run_warn_not_fail() -> None:
    out = invoke("roundtrip", *INKLING, *SMALL, *TRITON, "--json")
    assert out.exit_code == 0, out.output
    report = assert_valid(out.stdout, "roundtrip")
    assert report["verdict"] == "warn" and report["ok"] is True
    assert [w.split(" (")[0] for w in report["warnings"]] == [h["code"] for h in report["hazards"]]


def test_the_schema_has_teeth() -> None:
    report = json.loads(invoke("roundtrip", *INKLING, *SMALL, "--json").stdout)
    assert errors(report, "roundtrip") == []
    for key in ("components", "used", "inject_matched"):
        assert errors({k: v for k, v in report.items() if k != key}, "roundtrip"), key
    assert errors({**report, "exit_code": 1, "verdict": "fail"}, "roundtrip")  # ok: true cannot exit 1
    row = {**report["components"][0], "first_slot": "3"}
    assert errors({**report, "components": [row]}, "roundtrip")
    used = {k: v for k, v in report["used"].items() if k != "pool_bytes"}
    assert errors({**report, "used": used}, "roundtrip")


# ---- JUnit and the step summary agree with the exit code --------------------------------------


def _failed_cases(path: Path) -> dict[str, bool]:
    return {c.get("name"): c.find("failure") is not None for c in ET.parse(path).getroot().iter("testcase")}


def test_junit_and_summary_of_a_warning_run_pass_and_name_the_hazard(tmp_path: Path) -> None:
    junit, summary = tmp_path / "rt.xml", tmp_path / "summary.md"
    out = invoke(
        "roundtrip", *INKLING, *SMALL, *TRITON, "--junit", str(junit), env={"GITHUB_STEP_SUMMARY": str(summary)}
    )
    assert out.exit_code == 0, out.output
    cases = _failed_cases(junit)
    assert not any(cases.values()) and "conv_state" in cases
    assert any(name.startswith("KVD006") for name in cases)  # reported, not gated
    text = summary.read_text()
    assert "**passed with warnings**" in text and "| KVD006-MXFP8-PAGE-SIZE | error (not gated) |" in text


# ---- the human output -------------------------------------------------------------------------


def test_red_run_at_80_columns_names_every_red_row_and_ends_with_one_verdict() -> None:
    out = kvdoctor(
        "roundtrip", *INKLING, *SMALL, "--inject", "drop-block-scale", env={"COLUMNS": "80", "NO_COLOR": "1"}
    )
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert "…" not in out.stdout and max(len(line) for line in lines) <= 80
    assert any(line.startswith("full_kv_scales: first mismatch") for line in lines)
    verdict = " ".join(out.stdout[out.stdout.index("verdict:") :].split())
    assert verdict.startswith("verdict: FAILED — differs: full_kv_scales, swa_kv_scales")
    assert out.stdout.count("verdict:") == 1
    used = lines[lines.index("used") + 1 :]
    assert used[0].split()[0] == "run" and any(line.split()[:2] == ["reductions", "layers<=1,"] for line in used)
    assert "True" not in out.stdout and "None" not in out.stdout  # values as a person writes them


def test_a_model_path_with_markup_is_printed_literally(tmp_path: Path) -> None:
    from kvdoctor.core.config import bundled_fixtures

    folder = tmp_path / "[bold]evil[red]"  # rich would swallow both tags if it parsed them
    folder.mkdir()
    (folder / "config.json").write_text(Path(bundled_fixtures()["inkling-small"]).read_text())
    out = invoke("roundtrip", str(folder), *SMALL, "--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode")
    assert out.exit_code == 0, out.output
    assert "[bold]evil[red]" in "".join(out.stdout.split())


# ---- options: enums, checked before torch -----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["roundtrip", "inkling-small", "--inject", "missing-mambo"], "--inject"),
        (["roundtrip", "inkling-small", "--device", "tpu"], "--device"),
        (["bench", "roundtrip", "--device", "tpu"], "--device"),
        (["bench", "mxfp8", "--backend", "cuda"], "--backend"),
        (["bench", "mxfp8", "--dtype", "int8"], "--dtype"),
        (["bench", "mxfp8", "--scale-mode", "ceil"], "--scale-mode"),
    ],
)
def test_a_bad_choice_is_refused_before_torch_is_imported(args: list[str], option: str) -> None:
    code = (
        "import sys; from typer.testing import CliRunner; from kvdoctor.cli.app import app; "
        f"r = CliRunner().invoke(app, {args!r}); "
        "print(r.exit_code, 'torch' in sys.modules); print(r.output)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.splitlines()[0] == "2 False", out.stdout
    assert option in out.stdout


def test_help_lists_the_choices() -> None:
    from kvdoctor.state.faults import FAULTS

    text = invoke("roundtrip", "--help").stdout
    assert "<auto|cpu|cuda>" in text and all(f"{name}|" in text or f"{name}>" in text for name in FAULTS)
    bench = invoke("bench", "mxfp8", "--help").stdout
    for choices in ("all|torch|triton", "sglang|rceil|floor", "bfloat16|float16|float32", "auto|cpu|cuda"):
        assert f"<{choices}>" in bench, choices
    assert "[default: 0]" not in bench and "spec-table" in bench


# ---- progress ---------------------------------------------------------------------------------


def test_progress_names_the_step_that_is_running() -> None:
    from kvdoctor.roundtrip.options import Reductions, RoundtripOptions
    from kvdoctor.state.run import run_roundtrip
    from tests.state.helpers import analysis

    seen: list[tuple[str, int, int]] = []
    options = RoundtripOptions(device="cpu", requests=4, tokens=48, reductions=Reductions(layers=1, heads=1))
    run_roundtrip(analysis("inkling-small", "mxfp8"), options, lambda *update: seen.append(update))
    total = seen[0][2]
    assert seen[0] == ("allocate pools", 0, total)  # announced before it runs, nothing finished yet
    assert seen[1] == ("fill requests", 1, total)
    assert seen[-1] == ("done", total, total) and seen[-2] == ("diff every component", total - 1, total)
    assert [done for _, done, _ in seen] == list(range(total + 1))  # one step finishes between updates


def test_progress_display_shows_no_count_while_the_total_is_unknown() -> None:
    from rich.console import Console

    from kvdoctor.cli.progress import with_progress

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=80, color_system=None)
    frames: list[str] = []

    def run(update) -> int:
        update("import torch", 0, 0)
        frames.append(buf.getvalue())
        update("allocate pools", 0, 3)
        frames.append(buf.getvalue()[len(frames[0]) :])
        return 7

    assert with_progress(run, "start", console=console) == 7
    unknown, counted = (re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", frame) for frame in frames)  # drop cursor codes
    assert "import torch" in unknown and "0/" not in unknown and "None" not in unknown and "?" not in unknown
    assert "allocate pools" in counted and "0/3" in counted


def test_progress_draws_nothing_when_not_on_a_terminal() -> None:
    """Piped or in a CI log, a live display leaves only blank lines (a one-line error got two)."""
    from rich.console import Console

    from kvdoctor.cli.progress import with_progress

    buf = io.StringIO()
    seen: list[str] = []

    def run(update) -> str:
        update("import torch", 0, 0)
        update("allocate pools", 0, 2)
        seen.append("ran")
        return "result"

    assert with_progress(run, "start", console=Console(file=buf, force_terminal=False)) == "result"
    assert seen == ["ran"] and buf.getvalue() == ""
