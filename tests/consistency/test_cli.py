"""The command's contract before anything starts: one line and exit 2 for what cannot run, a dry-run plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def kvdoctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", "consistency", *args], capture_output=True, text=True, timeout=120
    )


def test_a_model_sglang_cannot_run_on_cpu_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = kvdoctor("nemotron-h-8b", "--shrink", "--output-dir", str(tmp_path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error: ")
    assert "sglang/srt/layers/attention/mamba/mamba.py:43-75" in lines[0]
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_a_fault_on_a_single_server_is_refused(tmp_path: Path) -> None:
    done = kvdoctor("lfm2-1.2b", "--shrink", "--inject", "missing-mamba", "--output-dir", str(tmp_path))
    assert done.returncode == 2 and "needs --topology pd" in done.stderr


def test_a_kv_fault_on_a_model_without_that_state_is_refused(tmp_path: Path) -> None:
    done = kvdoctor(
        "llama-3.1-8b", "--shrink", "--topology", "pd", "--inject", "missing-mamba", "--output-dir", str(tmp_path)
    )
    assert done.returncode == 2 and "needs recurrent" in done.stderr


def test_dry_run_prints_both_deployments_and_the_cpu_enablers() -> None:
    done = kvdoctor("lfm2-1.2b", "--shrink", "--topology", "pd", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    roles = [s["role"] for s in doc["deployment"]["steps"]]
    assert roles == ["prefill", "decode-reference", "decode-pressured", "router-reference", "router-pressured"]
    import importlib.util

    stand_in = any("stand-in" in e["name"] for e in doc["enablers"])
    assert stand_in == (importlib.util.find_spec("sgl_kernel") is None)  # only when the real one is absent
    assert any("TRITON_INTERPRET" in e["name"] for e in doc["enablers"])
    assert doc["deployment"]["pressured_pool_tokens"] < doc["deployment"]["reference_pool_tokens"]
