"""A bad number is the same one line under typer 0.28 (pinned: click's wording) and 0.29 (pydantic's wording)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvdoctor.cli.usage_words import plain

NOT_AN_INT = "Input should be a valid integer, unable to parse string as an integer"
NOT_A_NUMBER = "Input should be a valid number, unable to parse string as a number"

# (what typer 0.28 says, what typer 0.29 says): kvdoctor prints 0.29's words, without its "Value error, ".
BOTH = [
    ("Invalid value for '--seed': 'x' is not a valid int.", f"Invalid value for '--seed': {NOT_AN_INT}"),
    ("Invalid value for '--layers': 'q' is not a valid int range.", f"Invalid value for '--layers': {NOT_AN_INT}"),
    (
        "Invalid value for '--concurrent': '' is not a valid int range.",
        f"Invalid value for '--concurrent': {NOT_AN_INT}",
    ),
    ("Invalid value for '--tp': \"it's\" is not a valid int.", f"Invalid value for '--tp': {NOT_AN_INT}"),
    (
        "Invalid value for '--threshold': '1,5' is not a valid float.",
        f"Invalid value for '--threshold': {NOT_A_NUMBER}",
    ),
    ("Invalid value for '--x': 'a' is not a valid float range.", f"Invalid value for '--x': {NOT_A_NUMBER}"),
    (
        "Invalid value for '--tokens': 1 is not in the range x>=2.",
        "Invalid value for '--tokens': Input should be greater than or equal to 2",
    ),
    (
        "Invalid value for '--x': 9 is not in the range x<=8.",
        "Invalid value for '--x': Input should be less than or equal to 8",
    ),
    (
        "Invalid value for '--x': -3 is not in the range 1<=x<=8.",
        "Invalid value for '--x': Input should be greater than or equal to 1",
    ),
    (
        "Invalid value for '--x': 9 is not in the range 1<=x<=8.",
        "Invalid value for '--x': Input should be less than or equal to 8",
    ),
    (
        "Invalid value for '--device': 'gpu' is not one of 'auto', 'cpu', 'cuda'.",
        "Invalid value for '--device': Value error, 'gpu' is not one of 'auto', 'cpu', 'cuda'.",
    ),
]


@pytest.mark.parametrize(("click_words", "pydantic_words"), BOTH)
def test_both_typers_words_read_the_same(click_words: str, pydantic_words: str) -> None:
    assert plain(click_words) == plain(pydantic_words)
    assert "Value error" not in plain(pydantic_words)
    assert plain(plain(click_words)) == plain(click_words)  # already plain: left alone


def test_a_value_that_looks_like_a_message_is_not_rewritten() -> None:
    # The option's name and the rest of the line are kept: only the sentence after "': " is typer's.
    line = "Invalid value for '--model': no such fixture 'x' is not a valid int."
    assert plain(line) == line


CASES = [
    (["inspect", "inkling-small", "--request-tokens", "abc"], f"'--request-tokens': {NOT_AN_INT}", "inspect"),
    (
        ["inspect", "inkling-small", "--concurrent", "0"],
        "'--concurrent': Input should be greater than or equal to 1",
        "inspect",
    ),
    (["roundtrip", "inkling-small", "--seed", "x"], f"'--seed': {NOT_AN_INT}", "roundtrip"),
    (["pd-eval", "inkling-small", "--threshold", "1,5", "--dry-run"], f"'--threshold': {NOT_A_NUMBER}", "pd-eval"),
]


@pytest.mark.parametrize(("args", "words", "command"), CASES)
def test_a_bad_number_is_one_line_in_the_one_wording(args: list[str], words: str, command: str) -> None:
    out = subprocess.run([sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == f"kvdoctor: error: Invalid value for {words} (see 'kvdoctor {command} -h')\n"
