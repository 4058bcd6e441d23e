"""No verdict from an engine that did not run (issue 41, item 3): when the server's own code fails in a cell, the
cell is an error, never drift. Every cell failing exits 3 with one stderr line naming the server's error and where it
was raised; one failing among compared cells exits 3 too (1 when a cell also drifts); JUnit says ``<error>``.

No SGLang or vLLM here: the server's side (``beside``) is faked to raise from a file named as the server's own
(``vllm/platforms/cpu.py:243``, as vLLM 0.34.0 on an x86 CPU without triton-cpu did in every cell).
"""

from __future__ import annotations

import json
import types
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvdoctor.cli.app import app
from kvdoctor.core.engine_ref import EngineRef
from kvdoctor.core.vllm.analysis import VllmCheck
from kvdoctor.engines.vllm import drift as vllm_drift
from tests.schema_check import assert_valid

NARROW = {"COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
TRITON = "vLLM on x86 CPUs requires Triton (triton-cpu)."
WHERE = "vllm/platforms/cpu.py:243"
VLLM = EngineRef("vllm", "0.34.0", "/opt/site-packages/vllm")


def raiser(path: Path, line: int, exc: BaseException) -> Any:
    """A function whose raise is at PATH:LINE, as if the server's own file raised EXC."""
    code = compile("\n" * (line - 1) + "raise EXC", str(path), "exec")

    def raising(*args: object, **kwargs: object) -> Any:
        exec(code, {"EXC": exc})

    return raising


def vllm_file(tmp_path: Path) -> Path:
    return tmp_path / "site-packages" / "vllm" / "platforms" / "cpu.py"


def fake_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fails: Any = lambda case: True, drifts: Any = None):
    """vLLM found installed; its answer raises vLLM's Triton error where FAILS(analysis) says, else agrees in 3
    fields (one differs where DRIFTS(analysis) says)."""
    monkeypatch.setattr(vllm_drift.rt, "engine_info", lambda *a: VLLM)
    boom = raiser(vllm_file(tmp_path), 243, RuntimeError(TRITON))

    def beside(analysis: Any) -> Any:
        if fails(analysis):
            boom()
        checks = [VllmCheck(f"q{i}", "1", "1", True) for i in range(3)]
        if drifts is not None and drifts(analysis):
            checks[0] = VllmCheck("q0", "1", "2", False)
        return types.SimpleNamespace(checks=checks, drifts=[c for c in checks if not c.agree], refusals=[])

    monkeypatch.setattr(vllm_drift.asked, "beside", beside)


def run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["drift", *args], env=NARROW, catch_exceptions=False)


def junit_outcomes(path: Path) -> list[str]:
    return [next((child.tag for child in case), "passed") for case in ET.parse(path).iter("testcase")]


ONE = ("--server", "vllm", "--fixture", "llama-3.1-8b")
LINE = f"25 of 25 cases failed inside vLLM (RuntimeError: {TRITON} at {WHERE}); 0 fields compared"


def test_every_cell_failing_inside_vllm_is_exit_3_in_one_line_never_drift(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_vllm(monkeypatch, tmp_path)
    junit = tmp_path / "junit.xml"
    done = run(*ONE, "--json", "--junit", str(junit))
    assert done.exit_code == 3, done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kvdoctor: error: {LINE}"), done.stderr
    assert "drifting" not in done.stderr and "Traceback" not in done.stderr
    doc = assert_valid(done.stdout, "drift")
    assert (doc["verdict"], doc["exit_code"], doc["ok"]) == ("error", 3, False)
    assert (doc["cases"], doc["fields_compared"], doc["drifting_cases"], doc["error_cases"]) == (25, 0, 0, 25)
    row = doc["results"][0]
    assert (row["status"], row["ok"], row["drift"], row["fields"]) == ("error", False, [], 0)
    assert row["error"] == f"RuntimeError: {TRITON} at {WHERE}"
    assert set(junit_outcomes(junit)) == {"error"}  # never <failure>: nothing drifted
    assert TRITON in ET.parse(junit).find(".//error").get("message")


def test_every_cell_failing_reads_as_an_error_in_the_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_vllm(monkeypatch, tmp_path)
    done = run(*ONE)
    assert done.exit_code == 3, done.output
    out = " ".join(done.stdout.split())
    assert f"verdict: ERROR — {LINE}" in out, out
    assert "error inside vLLM in 25 of 25 cases (llama-3.1-8b · base," in out
    assert "drifting" not in out and "FAILED" not in out
    assert len(done.stderr.strip().splitlines()) == 1


def test_one_failing_cell_among_compared_ones_is_an_error_and_exit_3(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_vllm(monkeypatch, tmp_path, fails=lambda a: a.flags.enable_prefix_caching is False)
    junit = tmp_path / "junit.xml"
    done = run(*ONE, "--case", "base", "--case", "no-prefix", "--json", "--junit", str(junit))
    assert done.exit_code == 3, done.output
    doc = assert_valid(done.stdout, "drift")
    assert (doc["cases"], doc["fields_compared"], doc["drifting_cases"], doc["error_cases"]) == (2, 3, 0, 1)
    assert [r["status"] for r in doc["results"]] == ["ok", "error"]
    assert junit_outcomes(junit) == ["passed", "error"]
    line = done.stderr.strip()
    assert line.startswith(f"kvdoctor: error: 1 of 2 cases failed inside vLLM (RuntimeError: {TRITON} at {WHERE})")
    assert "llama-3.1-8b · no-prefix" in line and "drifting" not in line


def test_real_drift_beside_a_failing_cell_still_exits_1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_vllm(
        monkeypatch,
        tmp_path,
        fails=lambda a: a.flags.enable_prefix_caching is False,
        drifts=lambda a: True,
    )
    junit = tmp_path / "junit.xml"
    done = run(*ONE, "--case", "base", "--case", "no-prefix", "--json", "--junit", str(junit))
    assert done.exit_code == 1, done.output
    doc = assert_valid(done.stdout, "drift")
    assert (doc["verdict"], doc["drifting_cases"], doc["error_cases"]) == ("fail", 1, 1)
    assert [r["status"] for r in doc["results"]] == ["drift", "error"]
    assert junit_outcomes(junit) == ["failure", "error"]
    assert done.stderr == ""


def test_drift_alone_is_unchanged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_vllm(monkeypatch, tmp_path, fails=lambda a: False, drifts=lambda a: a.flags.enable_prefix_caching is False)
    done = run(*ONE, "--case", "base", "--case", "no-prefix")
    assert done.exit_code == 1, done.output
    last = " ".join(done.stdout[done.stdout.index("verdict:") :].split())
    assert last.startswith("verdict: FAILED — 2 cases, 6 fields compared, 1 drifting, ")
    assert last.endswith(": llama-3.1-8b · no-prefix")


# -- SGLang's side: the same rule -------------------------------------------------------------------------------


def test_every_sglang_cell_failing_is_exit_3_naming_sglangs_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from kvdoctor.core.sglang.rules import RULES_REVISION
    from kvdoctor.engines.sglang import _runtime
    from kvdoctor.engines.sglang import drift as sglang_drift

    root = tmp_path / "site-packages" / "sglang"
    version = RULES_REVISION.split("==")[-1]
    monkeypatch.setattr(_runtime, "engine_info", lambda: EngineRef("sglang", version, str(root)))
    monkeypatch.setattr(_runtime, "_sglang_root", lambda: root)
    boom = raiser(root / "srt" / "mem_cache" / "memory_pool.py", 77, RuntimeError("no CUDA here"))
    monkeypatch.setattr(sglang_drift, "beside", lambda *a, **k: boom())
    junit = tmp_path / "junit.xml"
    done = run("--fixture", "llama-3.1-8b", "--case", "colocated", "--case", "decode", "--json", "--junit", str(junit))
    assert done.exit_code == 3, done.output
    where = "sglang/srt/mem_cache/memory_pool.py:77"
    line = done.stderr.strip()
    assert line.startswith(f"kvdoctor: error: 2 of 2 cases failed inside SGLang (RuntimeError: no CUDA here at {where}")
    assert "\n" not in line and "drifting" not in line
    doc = json.loads(done.stdout)
    assert_valid(done.stdout, "drift")
    assert (doc["fields_compared"], doc["drifting_cases"], doc["error_cases"]) == (0, 0, 2)
    assert [r["status"] for r in doc["results"]] == ["error", "error"] and "sglang_refusal" in doc["results"][0]
    assert junit_outcomes(junit) == ["error", "error"]
