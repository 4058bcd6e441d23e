"""A bad choice is one plain line: what was wrong, the choices, where to look; no validation-layer jargon."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    (["roundtrip", "inkling-small", "--device", "gpu"], "'gpu' is not one of 'auto', 'cpu', 'cuda'"),
    (["inspect", "inkling-small", "--engine", "foo"], "'foo' is not one of 'kvdoctor', 'sglang', 'vllm'"),
    (["schema", "bogus"], "'bogus' is not one of 'inspect', 'roundtrip', 'pd-eval', 'drift'"),
]


@pytest.mark.parametrize(("args", "expected"), CASES)
def test_a_bad_choice_is_one_plain_line(args: list[str], expected: str) -> None:
    out = subprocess.run([sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error: Invalid value for "), out.stderr
    assert expected in lines[0] and f"(see 'kvdoctor {args[0]} -h')" in lines[0]
    assert "Value error" not in lines[0]  # typer's validation layer, not the user's mistake
    assert out.stdout == ""


@pytest.mark.parametrize("command", [["roundtrip", "inkling-small"], ["bench", "roundtrip"]])
def test_an_engine_the_command_cannot_drive_is_refused_not_ignored(command: list[str]) -> None:
    """`--engine vllm` used to run kvdoctor's own model and report it as a green round trip. The round trip
    runs on vLLM for vLLM's flags only (``--server vllm``); bench roundtrip not at all."""
    out = subprocess.run(
        [sys.executable, "-m", "kvdoctor", *command, "--engine", "vllm"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and out.stdout == ""
    expected = (
        "kvdoctor: error: --engine vllm answers for --server vllm (add --server vllm)"
        if command[0] == "roundtrip"
        else "kvdoctor: error: --engine vllm: bench roundtrip runs on kvdoctor or sglang; "
        "vLLM is answered by inspect, roundtrip and drift only"
    )
    assert out.stderr.strip() == expected


def test_a_malformed_server_flag_value_is_named_as_a_person_would() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kvdoctor", "inspect", "inkling-small", "--page-size", "abc"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "kvdoctor: error: server flags: argument --page-size: invalid positive integer value: 'abc'"
    )  # not argparse's "invalid _positive_int value"
