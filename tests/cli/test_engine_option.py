"""``--engine`` on the CLI where SGLang may be missing: the choice is checked, the fix is named."""

from __future__ import annotations

import importlib.util

import pytest
from typer.testing import CliRunner

from kvdoctor.cli.app import app

runner = CliRunner()


def test_unknown_engine_is_bad_input() -> None:
    out = runner.invoke(app, ["roundtrip", "inkling-small", "--engine", "vllm-nope"])
    assert out.exit_code == 2
    assert "Traceback" not in out.output


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
def test_engine_sglang_without_sglang_names_the_install_command() -> None:
    out = runner.invoke(app, ["roundtrip", "inkling-small", "--engine", "sglang", "--device", "cpu"])
    assert out.exit_code == 2, out.output
    assert "make sglang-env" in out.output
    assert "Traceback" not in out.output
