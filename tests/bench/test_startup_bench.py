"""``kvdoctor bench startup``: its report's shape, what it says a process loaded, and its refusals.

Correctness only: no assertion here depends on how fast anything ran.
"""

from __future__ import annotations

import json
import sys

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kvdoctor._exceptions import InternalError
from kvdoctor.bench import startup
from kvdoctor.bench.startup import CASES, Case, Imported, run_startup_bench
from kvdoctor.bench.timing import time_process
from kvdoctor.cli.app import app
from kvdoctor.cli.bench_startup import render

CASE_KEYS = {
    "name",
    "command",
    "cpu_median_s",
    "cpu_min_s",
    "wall_median_s",
    "vs_floor",
    "cpu_samples_s",
    "modules",
    "vllm_modules",
    "sglang_modules",
    "heavy_modules",
    "slowest_imports",
}


def test_one_round_reports_every_case_and_what_it_loaded() -> None:
    out = CliRunner().invoke(app, ["bench", "startup", "--rounds", "1", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert set(report) == {"rounds", "python", "target", "cases"}
    assert (report["rounds"], report["python"], report["target"]) == (1, sys.executable, 1.5)
    cases = {c["name"]: c for c in report["cases"]}
    assert list(cases) == [c.name for c in CASES]
    for case in cases.values():
        assert set(case) == CASE_KEYS
        assert len(case["cpu_samples_s"]) == 1 and case["cpu_median_s"] == case["cpu_samples_s"][0] > 0
        assert case["modules"] > 0 and len(case["slowest_imports"]) == startup.SLOWEST
        assert set(case["slowest_imports"][0]) == {"module", "self_ms", "cumulative_ms"}
    assert cases["floor"]["vs_floor"] == 1.0
    assert cases["floor"]["heavy_modules"] == [] and cases["floor"]["vllm_modules"] == []
    # The measurement sees vLLM's modules where they are (a vLLM question) and none for an SGLang one.
    for name in ("inspect-vllm", "inspect-vllm-json"):
        assert "kvdoctor.core.vllm.analysis" in cases[name]["vllm_modules"]
        assert cases[name]["sglang_modules"] == []  # a vLLM question loads nothing of SGLang (issue 29)
    for name in ("inspect", "inspect-json"):
        assert cases[name]["vllm_modules"] == []
        assert "kvdoctor.core.sglang.analysis" in cases[name]["sglang_modules"]
    # typer 0.29 imports pydantic to check option values; the pinned 0.28 does not (constraints/).
    assert "pydantic" not in cases["typer-command"]["heavy_modules"]
    assert cases["inspect"]["heavy_modules"] == []


def _result(inspect_ratio: float, inspect_vllm: list[str]) -> startup.StartupResult:
    def case(name: str, ratio: float, vllm: list[str]) -> startup.CaseResult:
        return startup.CaseResult(
            name=name,
            command=f"the {name} case",
            cpu_median_s=0.2 * ratio,
            cpu_min_s=0.2 * ratio,
            wall_median_s=0.3,
            vs_floor=ratio,
            cpu_samples_s=[0.2 * ratio],
            modules=200,
            vllm_modules=vllm,
            sglang_modules=[],
            heavy_modules=[],
            slowest_imports=[Imported("typer.main", 3.0, 9.0)],
        )

    cases = [case("floor", 1.0, []), case("inspect", inspect_ratio, inspect_vllm), case("help", 2.0, [])]
    return startup.StartupResult(rounds=5, python=sys.executable, target=1.5, cases=cases)


def _rendered(result: startup.StartupResult) -> str:
    console = Console(width=200, record=True, force_terminal=False, color_system=None)
    render(result, console)
    return console.export_text()


def test_the_table_ends_with_the_ratio_and_passes_within_the_target() -> None:
    text = _rendered(_result(1.4, []))
    assert "median of 5 interleaved rounds" in text and "own wall time): typer.main 3 ms" in text
    assert text.rstrip().splitlines()[-1] == (
        "verdict: passed — inspect 1.40x the floor (0.280 s vs 0.200 s CPU; target <= 1.5x)"
    )


def test_over_the_target_or_vllm_for_sglang_is_a_warning_not_a_gate() -> None:
    text = _rendered(_result(2.5, ["kvdoctor.core.vllm.analysis"]))
    last = text.rstrip().splitlines()[-1]
    assert last.startswith("verdict: passed with warnings — inspect 2.50x the floor")
    assert "over the target: inspect 2.50x" in last and "vLLM loaded for an SGLang question: inspect" in last
    assert "vLLM modules loaded for an SGLang question: kvdoctor.core.vllm.analysis" in text


def test_a_case_that_fails_is_not_timed() -> None:
    """A child that exits non-zero measured its error path: the bench stops with exit 4, never a ratio."""
    broken = (
        Case("floor", "python -c pass", ("-c", "pass")),
        Case("broken", "a broken start", ("-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)")),
    )
    with pytest.raises(InternalError, match=r"a broken start exited 3, so its start-up cannot be timed: boom"):
        run_startup_bench(1, cases=broken)


def test_rounds_below_one_are_refused() -> None:
    out = CliRunner().invoke(app, ["bench", "startup", "--rounds", "0"])
    assert out.exit_code == 2


def test_children_do_not_inherit_what_would_change_their_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", "/tmp/summary.md")  # a child must not write this run's summary
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    monkeypatch.setenv("_KVDOCTOR_COMPLETE", "complete_bash")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # the warm-up must cache byte code for the rounds
    monkeypatch.setenv("KEEP_ME", "1")
    env = startup.child_env()
    dropped = {"GITHUB_STEP_SUMMARY", "PYTHONPROFILEIMPORTTIME", "_KVDOCTOR_COMPLETE", "PYTHONDONTWRITEBYTECODE"}
    assert not dropped & set(env)
    assert env["KEEP_ME"] == "1"


def test_every_inspect_case_is_held_to_the_target() -> None:
    """Both servers' inspect, tables and --json, are measured and gated alike (issue 29: vLLM's was 1.73x);
    the SGLang ones are the SGLang questions checked for vLLM modules."""
    names = {c.name for c in CASES}
    assert {"inspect", "inspect-json", "inspect-vllm", "inspect-vllm-json"} <= names
    assert {c.name for c in CASES if c.sglang_question} == {"inspect", "inspect-json"}
    vllm_json = next(c for c in CASES if c.name == "inspect-vllm-json")
    assert vllm_json.args[-3:] == ("--server", "vllm", "--json")

    def case(name: str, ratio: float) -> startup.CaseResult:
        return startup.CaseResult(name, name, 0.2, 0.2, 0.3, ratio, [0.2], 10, [], [], [])

    cases = [case("floor", 1.0), case("inspect", 1.2), case("inspect-vllm", 1.6), case("inspect-vllm-json", 1.4)]
    result = startup.StartupResult(3, sys.executable, 1.5, cases)
    assert [c.name for c in result.over_target()] == ["inspect-vllm"]


def test_importtime_lines_are_read_in_order() -> None:
    stderr = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       120 |        120 |   vllm.config\n"
        "import time:      2000 |       2120 | kvdoctor.core.vllm\n"
        "kvdoctor: note: something else\n"
    )
    rows = startup.imported(stderr)
    assert rows == [Imported("vllm.config", 0.12, 0.12), Imported("kvdoctor.core.vllm", 2.0, 2.12)]
    names = [r.module for r in rows] + ["vllmx", "kvdoctor.core.vllmish"]
    assert startup.family(names, startup.VLLM) == ["kvdoctor.core.vllm", "vllm.config"]


def test_a_child_is_charged_and_reaped_and_a_hung_one_killed() -> None:
    ran = time_process([sys.executable, "-c", "import sys; sys.stderr.write('said'); sys.exit(5)"])
    assert (ran.exit_code, ran.stderr) == (5, "said") and ran.cpu_s > 0
    hung = time_process([sys.executable, "-c", "import time; time.sleep(600)"], timeout_s=0.5)
    assert hung.exit_code == -9  # killed; its status came from reaping it, so nothing is left behind
