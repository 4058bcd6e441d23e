"""``scripts/gpu-check.sh`` on a machine without a GPU: its usage errors, and a step it cannot run is never a pass.

The device steps themselves run only on a lent GPU (and, for the finding, in the CPU dry run the script's header
names); here only what decides the exit code without running a device step is held.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu-check.sh"


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_ALLOW_CPU": "1", **env}
    return subprocess.run(
        ["bash", str(SCRIPT), "--out", str(tmp_path / "out"), *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_an_unknown_step_is_a_usage_error(tmp_path: Path) -> None:
    done = _run(tmp_path, "--only", "finding,bogus")
    assert done.returncode == 2
    assert "unknown step bogus" in done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_no_step_at_all_is_a_usage_error_not_an_empty_pass(tmp_path: Path) -> None:
    done = _run(tmp_path, "--only", ",")
    assert done.returncode == 2 and "names no step" in done.stderr


def test_the_finding_without_a_server_env_is_skipped_not_passed(tmp_path: Path) -> None:
    done = _run(tmp_path, "--only", "finding", GPU_SERVER_ENV=str(tmp_path / "no-such-env"))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "SKIPPED" in done.stdout and "PASS" not in done.stdout
    assert "no SGLang server environment" in (tmp_path / "out" / "finding.skip").read_text()
    # only the chosen step is in the table: the others did not run, so they are neither MISSING nor passed
    assert "mxfp8" not in done.stdout and "roundtrip" not in done.stdout
