"""A model that is no path, bundled fixture or cached Hub id: one short line with a did-you-mean and what to do next
(never the list of every fixture, 900 characters in a CI log), through every command that resolves a model: the
one resolver in ``kvdoctor.core.config`` says it for all of them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor.core.config import bundled_fixtures

COMMANDS = [
    ("inspect",),
    ("roundtrip", "--device", "cpu"),
    ("consistency", "--shrink", "--dry-run"),
    ("pd-eval", "--oracle", "tokens", "--shrink", "--dry-run"),
]


def _kvdoctor(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    hub = tmp_path / "hf"  # an empty Hugging Face cache, read offline: nothing the developer's machine holds
    env = {
        **os.environ,
        "COLUMNS": "80",
        "NO_COLOR": "1",
        "HF_HOME": str(hub),
        "HF_HUB_CACHE": str(hub / "hub"),
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("GITHUB_STEP_SUMMARY", None)
    return subprocess.run(
        [sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )


def _one_line(out: subprocess.CompletedProcess[str], model: str) -> str:
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout[-300:], out.stderr[-300:])
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error: "), out.stderr
    line = lines[0]
    assert "Traceback" not in out.stderr
    named = [f for f in bundled_fixtures() if f" {f}" in line or f"{f}?" in line or f"{f}," in line]
    assert len(named) <= 1, named  # a did-you-mean at most, never the list
    assert len(line) - 2 * len(model) < 200, line  # short, however the model is spelled
    return line


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_mistyped_fixture_gets_a_did_you_mean_and_where_the_fixtures_are(tmp_path: Path, command: tuple) -> None:
    line = _one_line(_kvdoctor(tmp_path, command[0], "inkling-smal", *command[1:]), "inkling-smal")
    assert "did you mean inkling-small?" in line
    assert "bundled fixtures: ls " in line and line.rstrip(")").endswith("models")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_an_uncached_hub_id_says_how_to_put_its_config_in_the_cache(tmp_path: Path, command: tuple) -> None:
    model = "Qwen/Qwen3-Next-80B-A3B-Instruct"
    line = _one_line(_kvdoctor(tmp_path, command[0], model, *command[1:]), model)
    assert f"hf download {model} config.json" in line and "model directory" in line
    assert "did you mean the fixture qwen3-next-80b-a3b?" in line


def test_a_name_with_nothing_close_and_a_missing_path(tmp_path: Path) -> None:
    line = _one_line(_kvdoctor(tmp_path, "inspect", "zzzz"), "zzzz")
    assert "did you mean" not in line and "bundled fixture" in line
    line = _one_line(_kvdoctor(tmp_path, "inspect", "./no/such/dir"), "./no/such/dir")
    assert line == "kvdoctor: error: ./no/such/dir: no such file or directory"
    long = "x" * 5000  # echoed cut to a readable length, and no did-you-mean over it
    assert len(_kvdoctor(tmp_path, "inspect", long).stderr) < 400
