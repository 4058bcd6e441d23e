"""A single-valued kvdoctor option given twice is refused (exit 2, one line naming every value), in
every command, from the raw command line against the command's own click parameters
(kvdoctor/cli/repeats.py). Before: click kept the last, so ``--inject A --inject B`` injected B alone."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from kvdoctor._exceptions import InputError
from kvdoctor.cli.app import app
from kvdoctor.cli.repeats import refuse_repeated

ROOT = typer.main.get_command(app)

REFUSED = {
    "roundtrip --inject": (
        ["roundtrip", "inkling-small", "--inject", "missing-mamba", "--inject", "stale-scales"],
        "--inject was given 2 times (missing-mamba, stale-scales)",
    ),
    "bench roundtrip --requests=": (
        ["bench", "roundtrip", "--requests=4", "--device", "cpu", "--requests", "8"],
        "--requests was given 2 times (4, 8)",
    ),
    "inspect --junit": (
        ["inspect", "m", "--junit", "a.xml", "--junit=b.xml"],
        "--junit was given 2 times (a.xml, b.xml)",
    ),
    "roundtrip --device around a server flag": (
        ["roundtrip", "m", "--device", "cpu", "--page-size", "16", "--device", "cuda"],
        "--device was given 2 times (cpu, cuda)",
    ),
    "bench mxfp8": (["bench", "mxfp8", "--repeats", "1", "--repeats", "2"], "--repeats was given 2 times (1, 2)"),
    "bench mxfp8 on/off": (["bench", "mxfp8", "--no-sweep", "--sweep"], "--no-sweep and --sweep contradict"),
    "pd-eval on/off": (["pd-eval", "m", "--mini-lb", "--no-mini-lb"], "--mini-lb and --no-mini-lb contradict"),
    "pd-eval --tp": (["pd-eval", "m", "--tp", "1", "--dry-run", "--tp", "2"], "--tp was given 2 times (1, 2)"),
}
ALLOWED = {
    "repeatable --fixture": ["drift", "--fixture", "a", "--fixture", "b", "--case", "x", "--case", "y"],
    "a flag twice": ["inspect", "m", "--json", "--json"],
    "server flags": ["inspect", "m", "--page-size", "16", "--page-size", "32"],
    "after --": ["pd-eval", "m", "--tp", "1", "--", "--tp", "2", "--tp", "4"],
    "pasted launch line": [
        "inspect",
        "m",
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--device",
        "a",
        "--device",
        "b",
    ],
    "a value that looks like the option": ["inspect", "m", "--junit", "--junit"],
    "unknown command": ["no-such", "--x", "1", "--x", "2"],
    "bench roundtrip's unknown --inject": ["bench", "roundtrip", "--inject", "a", "--inject", "b"],
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_repeated_single_valued_option_is_refused(name: str) -> None:
    argv, expected = REFUSED[name]
    with pytest.raises(InputError) as caught:
        refuse_repeated(ROOT, argv)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_repeatable_options_and_server_flags_pass(name: str) -> None:
    refuse_repeated(ROOT, ALLOWED[name])


def test_two_injected_faults_are_one_line_and_exit_2_before_any_work() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kvdoctor", *REFUSED["roundtrip --inject"][0]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (
        "kvdoctor: error: --inject was given 2 times (missing-mamba, stale-scales) but takes one value per run; "
        "kvdoctor would silently keep only the last: give it once (see 'kvdoctor roundtrip -h')\n"
    )
