"""``kvdoctor bench consistency`` without servers: the run's own timing records (``Stopwatch``, ``timed_burst``,
``evaluate``, driven on a scripted clock), what the bench makes of them, what it refuses, and its CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, DeploymentError, GateFailure, Interrupted
from kvdoctor.bench.consistency import BURSTS, TARGET_S, measure
from kvdoctor.cli.app import app
from kvdoctor.cli.bench_consistency import render
from kvdoctor.consistency.report import json_document
from kvdoctor.consistency.result import Stopwatch
from tests.bench.recorded import BURST_S, GAP_S, READY_S, ScriptedClock, recorded
from tests.schema_check import assert_valid

ORDER = ["prepare", "start-up", "warm-up", *BURSTS, "compare", "teardown", "trace"]


# -- the recording ----------------------------------------------------------------------------------------
def test_the_stopwatch_times_every_phase_from_the_runs_start_and_drops_one_that_raised() -> None:
    clock = ScriptedClock()
    watch = Stopwatch(clock)
    clock.advance(1.5)
    with watch.phase("prepare"):
        clock.advance(2.0)
    with pytest.raises(RuntimeError), watch.phase("start-up"):
        clock.advance(7.0)
        raise RuntimeError("a server died")
    launched = watch.now()
    clock.advance(3.25)
    ready = watch.server("reference", launched)
    assert [(s.name, s.start_s, s.end_s, s.seconds) for s in watch.timeline.phases] == [("prepare", 1.5, 3.5, 2.0)]
    assert (ready.name, ready.start_s, ready.end_s, ready.seconds) == ("reference", 10.5, 13.75, 3.25)
    assert watch.timeline.servers == [ready] and watch.timeline.cpus >= 1


def test_a_burst_is_timed_on_the_runs_clock_and_its_burst_and_span_agree() -> None:
    r = recorded()
    for burst in r.bursts:
        span = r.timeline.phase(burst.name)
        assert span is not None
        assert (burst.start_s, burst.end_s) == (span.start_s, span.end_s)
        assert burst.wall_s == span.seconds == BURST_S[burst.name]
        assert burst.output_tokens == span.output_tokens == 8 * 24
        assert burst.tokens_per_s == round(8 * 24 / BURST_S[burst.name], 1)
    assert [s.name for s in r.timeline.phases] == ORDER
    assert r.launch_s == READY_S and [s.seconds for s in r.timeline.servers] == list(READY_S.values())


# -- what the bench reads from it -------------------------------------------------------------------------
def test_the_bench_reads_the_runs_records_and_puts_the_ratios_side_by_side() -> None:
    r = recorded()
    bench = measure(r)
    assert bench.exit_code == 0 and bench.consistency["passed"]
    by_name = {b.name: b for b in bench.bursts}
    assert [b.output_tokens for b in bench.bursts] == [b.output_tokens for b in r.bursts]
    assert by_name["pressured"].retractions == 5 and by_name["reference"].retractions == 0
    assert bench.ratios.pressured_vs_reference == pytest.approx(BURST_S["reference"] / BURST_S["pressured"], rel=1e-3)
    assert bench.ratios.repeat_vs_reference == pytest.approx(BURST_S["reference"] / BURST_S["reference-repeat"], 1e-3)
    startup = max(READY_S.values())  # every server launched at once: start-up ends with the slowest
    assert bench.startup_s == startup
    assert bench.ratios.startup_share == pytest.approx(startup / r.wall_s, abs=1e-4)
    assert bench.total_s == r.wall_s and bench.ratios.vs_target == pytest.approx(r.wall_s / TARGET_S, abs=1e-4)
    # the phases follow each other: their sum and the gaps between them are the total
    assert [p.name for p in bench.phases] == ORDER
    assert bench.timed_s + bench.untimed_s == pytest.approx(bench.total_s)
    assert bench.untimed_s == pytest.approx(3 * GAP_S)
    for before, after in zip(bench.phases, bench.phases[1:], strict=False):
        assert before.start_s + before.seconds <= after.start_s
    assert {s.role: s.seconds for s in bench.servers} == READY_S


def test_a_run_over_the_6_minute_target_is_a_warning_and_one_under_it_is_not() -> None:
    slow, quick = measure(recorded(slow=1.0)), measure(recorded(slow=0.5))
    assert slow.total_s > TARGET_S and len(slow.warnings) == 1 and "360 s target" in slow.warnings[0]
    assert quick.total_s < TARGET_S and quick.warnings == []


def test_a_run_that_retracted_but_diverged_is_measured_and_exits_1() -> None:
    r = recorded(diverge=True)
    assert r.exit_code == EXIT_GATE and r.exit_reason == "diverged"
    bench = measure(r)
    assert bench.exit_code == EXIT_GATE and bench.to_dict()["exit_code"] == EXIT_GATE
    assert "the consistency run FAILED" in bench.detail()


@pytest.mark.parametrize("pressured", [0, None])
def test_a_run_that_never_retracted_gives_no_number(pressured: int | None) -> None:
    r = recorded(pressured=pressured)
    with pytest.raises(GateFailure, match="retraction, did not happen") as caught:
        measure(r)
    assert caught.value.exit_code == EXIT_GATE


def test_a_failed_deployment_gives_no_number_and_exits_3() -> None:
    r = replace(
        recorded(), passed=False, exit_code=EXIT_DEPLOYMENT, exit_reason="server_exited", message="reference exited (1)"
    )
    with pytest.raises(DeploymentError, match="did not happen: reference exited") as caught:
        measure(r)
    assert caught.value.exit_code == EXIT_DEPLOYMENT


def test_an_interrupted_run_gives_no_number_and_the_signals_code() -> None:
    r = replace(recorded(), passed=False, exit_code=143, exit_reason="interrupted")
    with pytest.raises(Interrupted) as caught:
        measure(r)
    assert caught.value.signum == 15


def test_a_result_whose_burst_generated_nothing_gives_no_number() -> None:
    r = recorded(length=0)  # every reply empty: no tok/s to report (the run's sensitivity gate is red too)
    with pytest.raises(GateFailure, match="no tokens generated in the reference, reference-repeat, pressured"):
        measure(r)


# -- rendering and JSON -----------------------------------------------------------------------------------
def test_the_tables_carry_the_measured_numbers_within_80_columns() -> None:
    bench = measure(recorded())
    console = Console(record=True, width=80, color_system=None)
    render(bench, console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    for needle in ("launch to ready", "120.0", "150.0", "1.3", "3.2", "0.40x the reference's tok/s", "402 s"):
        assert needle in text, needle
    row = next(line for line in text.splitlines() if line.startswith("│ pressured") and "192" in line)
    assert re.findall(r"[\d.]+", row) == ["150.0", "192", "1.3", "5"]


def test_the_consistency_json_carries_the_timeline_and_validates() -> None:
    doc = assert_valid(json_document(recorded()), "consistency")
    assert [p["name"] for p in doc["timeline"]["phases"]] == ORDER
    assert [s["name"] for s in doc["timeline"]["servers"]] == list(READY_S)
    assert [(b["start_s"], b["end_s"]) for b in doc["bursts"]] == [
        (p["start_s"], p["end_s"]) for p in doc["timeline"]["phases"] if p["name"] in BURSTS
    ]


# -- the command ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["--requests", "0"],
        ["--concurrency", "0"],
        ["--topology", "ring"],
        ["--device", "tpu"],
        ["--timeout", "0"],
        ["not-a-flag"],
        ["--requests", "many"],
        ["--", "--no-such-sglang-flag"],
    ],
)
def test_bad_options_are_one_line_and_exit_2_with_nothing_written(args: list[str], tmp_path: Path) -> None:
    argv = ["bench", "consistency", "llama-3.1-8b", "--shrink", "--output-dir", str(tmp_path), *args]
    done = subprocess.run([sys.executable, "-m", "kvdoctor", *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.startswith("kvdoctor: error: ")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_model_sglang_cannot_run_on_cpu_is_refused_before_anything_starts(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["bench", "consistency", "nemotron-h-8b", "--shrink", "--output-dir", str(tmp_path)])
    assert out.exit_code == 2 and "mamba.py:43-75" in out.output
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Replace the servers (``kvdoctor.consistency.run.run``) by a recorded run; the rest of the command is real."""
    import kvdoctor.consistency.run as consistency_run

    made: dict[str, object] = {}

    def install(*, failed: bool = False, **kwargs: object) -> dict[str, object]:
        def run(prepared: object, *, notify: object = None) -> object:
            r = recorded(**kwargs)  # type: ignore[arg-type]
            if failed:  # what run() returns when a server died: its timeline stops where the run did
                r = replace(r, passed=False, exit_code=EXIT_DEPLOYMENT, exit_reason="server_exited")
                r = replace(r, message="pressured exited with code 1 before it was healthy")
            r = replace(r, run_dir=str(tmp_path / "run"))
            Path(r.run_dir).mkdir()
            made["result"] = r
            return r

        monkeypatch.setattr(consistency_run, "run", run)
        return made

    return install


def test_the_command_prints_the_bench_json_and_keeps_the_runs_record(fake_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    made = fake_run()
    out = CliRunner().invoke(app, ["bench", "consistency", "llama-3.1-8b", "--shrink", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    result = made["result"]
    assert [b["output_tokens"] for b in doc["bursts"]] == [b.output_tokens for b in result.bursts]
    assert doc["total_s"] == result.wall_s and doc["exit_code"] == 0
    assert json.loads((tmp_path / "run" / "bench.json").read_text()) == doc
    assert_valid(json.loads((tmp_path / "run" / "result.json").read_text()), "consistency")


@pytest.mark.parametrize(
    ("how", "code", "why"),
    [
        ({"pressured": 0}, EXIT_GATE, "nothing measured: the run's subject, retraction, did not happen"),
        ({"failed": True}, EXIT_DEPLOYMENT, "nothing measured: the consistency run did not happen: pressured exited"),
    ],
)
def test_the_command_without_its_subject_says_so_and_prints_no_number(  # type: ignore[no-untyped-def]
    fake_run, tmp_path: Path, how: dict[str, object], code: int, why: str
) -> None:
    fake_run(**how)
    for extra in (["--json"], []):
        out = CliRunner().invoke(app, ["bench", "consistency", "llama-3.1-8b", "--shrink", *extra])
        assert out.exit_code == code
        assert "bench consistency:" not in out.stdout and "verdict:" not in out.stdout  # no table, no verdict
        assert out.stdout == "" or not extra  # with --json no document (the run's head went to stderr)
        errors = [line for line in out.stderr.splitlines() if line.startswith("kvdoctor: ")]
        assert errors == [out.stderr.splitlines()[-1]] and errors[0].startswith(f"kvdoctor: error: {why}")
        assert not (tmp_path / "run" / "bench.json").exists()
        assert (tmp_path / "run" / "result.json").exists()  # the run's own record stays
        (tmp_path / "run" / "result.json").unlink()
        (tmp_path / "run").rmdir()


def test_the_command_table_ends_with_the_verdict_line(fake_run) -> None:  # type: ignore[no-untyped-def]
    fake_run(diverge=True)
    out = CliRunner().invoke(app, ["bench", "consistency", "llama-3.1-8b", "--shrink"], env={"COLUMNS": "80"})
    assert out.exit_code == EXIT_GATE
    lines = out.stdout.splitlines()
    at = max(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    assert at > max(i for i, line in enumerate(lines) if line.startswith("bursts"))
    tail = " ".join(" ".join(lines[at:]).split())
    assert tail.startswith("verdict: FAILED — ") and "the consistency run FAILED: " in tail and "diverge" in tail
