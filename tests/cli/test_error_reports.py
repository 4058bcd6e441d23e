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
