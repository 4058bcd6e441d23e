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
