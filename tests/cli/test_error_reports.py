"""A run that ends without a verdict says so in JUnit and the step summary, not only on stderr.

Before, exit 2 wrote nothing: a JUnit file left by an earlier green run still read as a pass, and
the step summary's last word was that run's "passed".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import Error, JUnitXml

RUNS = {
    "inspect": ["inspect", "inkling-small"],
    "roundtrip": ["roundtrip", "inkling-small", "--device", "cpu", "--requests", "2", "--tokens", "8"],
}


def kvdoctor(args: list[str], summary: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.parametrize("command", sorted(RUNS))
def test_exit_2_after_a_green_run_replaces_its_junit_and_says_error(tmp_path: Path, command: str) -> None:
    junit, summary = tmp_path / "report.xml", tmp_path / "summary.md"
    green = kvdoctor([*RUNS[command], "--junit", str(junit)], summary)
    assert green.returncode == 0, green.stderr
    bad = kvdoctor([*RUNS[command], "--page-size", "abc", "--junit", str(junit)], summary)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("kvdoctor: error: ")
    cases = [case for suite in JUnitXml.fromfile(str(junit)) for case in suite]
    assert len(cases) == 1 and isinstance(cases[0].result[0], Error)  # no verdict: an error, not a pass
    assert "invalid positive integer value" in cases[0].result[0].message
    last = summary.read_text().split("### ")[-1]
    assert "**ERROR** (exit 2)" in last and "**passed**" not in last


def test_pd_eval_stopped_by_bad_input_replaces_an_earlier_pass(tmp_path: Path) -> None:
    """pd-eval refuses a missing --data-path in its preparation (exit 2); without its unfinished-run record
    (``PdEvalRun.record``) the JUnit file an earlier green run left would still read as this run's pass."""
    from kvdoctor.report import junit as kvjunit

    report, summary = tmp_path / "x.xml", tmp_path / "summary.md"
    kvjunit.write(report, "kvdoctor pd-eval", [kvjunit.Case("accuracy", kvjunit.PASSED)], classname="kvdoctor.pd_eval")
    urls = ["--prefill-url", "http://127.0.0.1:1", "--decode-url", "http://127.0.0.1:2"]
    args = ["pd-eval", "m", *urls, "--router-url", "http://127.0.0.1:3", "--data-path", str(tmp_path / "no.jsonl")]
    bad = kvdoctor([*args, "--junit", str(report)], summary)
    assert bad.returncode == 2 and bad.stderr.startswith("kvdoctor: error: "), bad.stderr
    cases = [case for suite in JUnitXml.fromfile(str(report)) for case in suite]
    assert [c.name for c in cases] == ["kvdoctor"] and isinstance(cases[0].result[0], Error)
    assert "**ERROR** (exit 2)" in summary.read_text().split("### ")[-1]


def test_inspect_for_vllm_stopped_by_bad_input_replaces_an_earlier_pass(tmp_path: Path) -> None:
    """``inspect --server vllm`` keeps the unfinished-run record too (``VllmInspectRun.record``): a bad vLLM
    flag value after a green run must not leave that run's JUnit pass standing."""
    junit, summary = tmp_path / "report.xml", tmp_path / "summary.md"
    run = ["inspect", "llama-3.1-8b", "--server", "vllm", "--junit", str(junit)]
    green = kvdoctor(run, summary)
    assert green.returncode == 0, green.stderr
    bad = kvdoctor([*run, "--max-model-len", "abc"], summary)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("kvdoctor: error: ")
    cases = [case for suite in JUnitXml.fromfile(str(junit)) for case in suite]
    assert len(cases) == 1 and isinstance(cases[0].result[0], Error)
    last = summary.read_text().split("### ")[-1]
    assert "**ERROR** (exit 2)" in last and "**passed**" not in last
