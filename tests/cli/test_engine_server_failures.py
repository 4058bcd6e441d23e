"""``inspect --engine`` and ``roundtrip --engine``: the server's own code failing (not refusing) is no answer, no drift
hazard and no kvdoctor bug: exit 3 with one line naming the server's error and where it was raised (issue 41, item 3).
The server is faked (none is installed here): its side raises from a file named as the server's own."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor._exceptions import DeploymentError
from kvdoctor.cli.app import app
from kvdoctor.core.engine_ref import EngineRef
from tests.cli.test_drift_engine_errors import NARROW, TRITON, VLLM, WHERE, raiser, vllm_file


def one_line(done) -> str:  # type: ignore[no-untyped-def]
    lines = done.stderr.strip().splitlines()
    assert done.exit_code == 3 and len(lines) == 1, (done.exit_code, done.output)
    assert "Traceback" not in done.stderr and "kvdoctor bug" not in done.stderr
    return lines[0]


def test_inspect_engine_vllm_failing_inside_vllm_is_exit_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kvdoctor.engines.vllm import _runtime
    from kvdoctor.engines.vllm import inspect as vllm_inspect

    monkeypatch.setattr(_runtime, "engine_info", lambda *a: VLLM)
    monkeypatch.setattr(vllm_inspect, "beside", raiser(vllm_file(tmp_path), 243, RuntimeError(TRITON)))
    done = CliRunner().invoke(app, ["inspect", "llama-3.1-8b", "--server", "vllm", "--engine", "vllm"], env=NARROW)
    assert one_line(done) == (
        "kvdoctor: error: vLLM failed inside its own code during inspect --engine vllm: "
        f"RuntimeError: {TRITON} at {WHERE}"
    )


def test_roundtrip_engine_vllm_failing_inside_vllm_is_exit_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kvdoctor.engines.vllm import roundtrip as vllm_roundtrip

    monkeypatch.setattr(vllm_roundtrip.rt, "engine_info", lambda *a: VLLM)
    monkeypatch.setattr(vllm_roundtrip, "_preflight", raiser(vllm_file(tmp_path), 243, RuntimeError(TRITON)))
    with pytest.raises(
        DeploymentError, match=r"during roundtrip --engine vllm: RuntimeError: .* at vllm/platforms/cpu"
    ):
        vllm_roundtrip.run_vllm_roundtrip("llama-3.1-8b")


def test_a_failure_no_frame_of_vllm_raised_stays_kvdoctors_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """Teeth the other way: kvdoctor's own error is not passed off as the server's (exit 4 stays exit 4)."""
    from kvdoctor.engines.vllm import roundtrip as vllm_roundtrip

    monkeypatch.setattr(vllm_roundtrip.rt, "engine_info", lambda *a: VLLM)
    monkeypatch.setattr(vllm_roundtrip, "_preflight", lambda *a: [][1])
    with pytest.raises(IndexError):
        vllm_roundtrip.run_vllm_roundtrip("llama-3.1-8b")


def fake_sglang(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    from kvdoctor.core.sglang.rules import RULES_REVISION
    from kvdoctor.engines.sglang import _runtime

    root = tmp_path / "site-packages" / "sglang"
    version = RULES_REVISION.split("==")[-1]
    monkeypatch.setattr(_runtime, "engine_info", lambda: EngineRef("sglang", version, str(root)))
    monkeypatch.setattr(_runtime, "_sglang_root", lambda: root)
    return root / "srt" / "mem_cache" / "memory_pool.py"


def test_inspect_engine_sglang_failing_inside_sglang_is_exit_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kvdoctor.engines.sglang import inspect as sglang_inspect

    path = fake_sglang(monkeypatch, tmp_path)
    monkeypatch.setattr(sglang_inspect, "beside", raiser(path, 77, RuntimeError("no CUDA here")))
    done = CliRunner().invoke(app, ["inspect", "llama-3.1-8b", "--engine", "sglang"], env=NARROW)
    line = one_line(done)
    assert line.startswith(
        "kvdoctor: error: SGLang failed inside its own code during inspect --engine sglang: "
        "RuntimeError: no CUDA here at sglang/srt/mem_cache/memory_pool.py:77"
    ), line


def test_roundtrip_engine_sglang_failing_inside_sglang_is_exit_3(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from kvdoctor.engines.sglang import _runtime
    from kvdoctor.engines.sglang import roundtrip as sglang_roundtrip
    from kvdoctor.roundtrip.options import RoundtripOptions

    path = fake_sglang(monkeypatch, tmp_path)
    monkeypatch.setattr(_runtime, "resolve", lambda *a: types.SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(sglang_roundtrip, "_run", raiser(path, 77, RuntimeError("no CUDA here")))
    with pytest.raises(
        DeploymentError, match=r"during roundtrip --engine sglang: RuntimeError: no CUDA here at sglang/"
    ):
        sglang_roundtrip.run_roundtrip("llama-3.1-8b", [], RoundtripOptions())
