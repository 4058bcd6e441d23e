"""A replay's vLLM cases where vLLM is not installed: run by the vLLM engine env's interpreter when one is named
(``KVDOCTOR_VLLM_PYTHON``, else the checkout's ``.venv-vllm``), reported not run when none is. Here the named
interpreter is this one, which has no vLLM: the round trip refuses (exit 2) and the replay carries its own line."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from kvdoctor._exceptions import DeploymentError
from kvdoctor.core.replays import get
from kvdoctor.replay import run
from kvdoctor.replay.plan import side

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")


def test_the_named_engine_env_runs_the_round_trip_and_its_refusal_comes_back_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(run.VLLM_PYTHON_ENV, sys.executable)
    key = side(get("vllm#53084"), control=True).key
    call = run.RealRunner().roundtrip(key, None)
    assert call is not None
    with pytest.raises(DeploymentError) as caught:
        call()
    said = str(caught.value)
    assert said.startswith("kvdoctor roundtrip nemotron-h-8b --server vllm --engine vllm --device cpu --json")
    assert "kvdoctor: error:" in said and "vllm" in said.lower() and "\n" not in said


def test_without_an_engine_env_the_case_is_not_run(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv(run.VLLM_PYTHON_ENV, raising=False)
    monkeypatch.setattr(run, "__file__", str(tmp_path / "kvdoctor" / "replay" / "run.py"))  # no .venv-vllm beside
    assert run.vllm_python() is None
    assert run.RealRunner().roundtrip(side(get("vllm#53084"), control=True).key, None) is None
