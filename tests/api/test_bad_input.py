"""The API under a Python caller's mistakes: a value outside a keyword's choices is the CLI's bad input (a
``kvdoctor`` exception, exit code 2, naming the keyword and the choices), never a ``ValueError`` or ``KeyError``
traceback; a string where a list is taken is one name (or a shell-split line of flags), never its characters."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import kvdoctor
import kvdoctor.api as api
from kvdoctor.api import _consistency

BAD_CHOICES: dict[str, Callable[[], Any]] = {
    "inspect gpu_arch": lambda: api.inspect("inkling-small", gpu_arch="sm999"),
    "inspect engine": lambda: api.inspect("inkling-small", engine="trtllm"),
    "inspect server": lambda: api.inspect("inkling-small", server="trtllm"),
    "roundtrip device": lambda: api.roundtrip("inkling-small", device="tpu"),
    "roundtrip engine": lambda: api.roundtrip("inkling-small", engine="trtllm"),
    "roundtrip server": lambda: api.roundtrip("inkling-small", server="trtllm"),
    "drift gpu_arch": lambda: api.drift(gpu_arch="sm999"),
    "drift server": lambda: api.drift(server="trtllm"),
    "pd_eval oracle": lambda: api.pd_eval("inkling-small", oracle="bleu"),
}


@pytest.mark.parametrize("case", sorted(BAD_CHOICES))
def test_a_value_outside_the_choices_is_bad_input_naming_the_keyword(case: str) -> None:
    keyword = case.split()[1]
    with pytest.raises(kvdoctor.InputError) as raised:
        BAD_CHOICES[case]()
    assert raised.value.exit_code == 2
    message = str(raised.value)
    assert f"{keyword}=" in message and "is not one of" in message, message


def test_one_bug_as_a_string_is_that_bug() -> None:
    with pytest.raises(kvdoctor.InputError) as raised:
        api.replay(bug="sglang#0000")
    assert "sglang#0000" in str(raised.value)  # not "s", the string's first character


def test_server_args_as_one_string_are_split_as_a_shell_does(monkeypatch: pytest.MonkeyPatch) -> None:
    jobs: list[Any] = []
    monkeypatch.setattr(_consistency, "execute", jobs.append)  # the job as the API built it, nothing run
    api.consistency(
        "lfm2-1.2b", shrink=True, topology="pd", server_args="--disable-overlap-schedule --chunked-prefill-size 64"
    )
    options = jobs[0].options
    assert options.extra_args == ("--disable-overlap-schedule", "--chunked-prefill-size", "64")
    with pytest.raises(kvdoctor.InputError, match="server_args="):
        api.consistency("lfm2-1.2b", shrink=True, topology="pd", server_args="--foo 'unclosed")


def test_inspect_reads_a_string_of_flags_as_the_same_launch_line() -> None:
    flags = ["--kv-cache-dtype", "mxfp8", "--disaggregation-mode", "decode", "--page-size", "128"]
    as_list = json.loads(api.inspect("inkling-small", server_args=flags).to_json())
    as_text = json.loads(api.inspect("inkling-small", server_args=" ".join(flags)).to_json())
    for doc in (as_list, as_text):
        doc.pop("timestamp", None)
    assert as_text == as_list
    assert "mxfp8" in json.dumps(as_list)  # the flags were read, not dropped


def _bounded_and_chosen() -> list[tuple[str, str, Any]]:
    """Every option the CLI bounds (an int range) or chooses (a fixed list), with a value it refuses: below the range,
    or outside the list. Read from the click command Typer builds, so an option that gains a bound gains a case."""
    from kvdoctor.cli.app import COMMANDS, app

    cases = []
    for lazy in COMMANDS:
        if lazy.name not in FUNCTION_MODELS:
            continue
        for param in lazy.build(app.rich_markup_mode).params:
            kind = type(param.type).__name__
            if kind == "IntRange" and param.type.min is not None:  # type: ignore[attr-defined]
                cases.append((lazy.name, str(param.name), param.type.min - 1))  # type: ignore[attr-defined]
            elif kind in ("Choice", "TyperChoice"):
                cases.append((lazy.name, str(param.name), "not-a-choice"))
    return cases


# Each command's cheapest model (its bad option refused before any server, pool or eval starts).
FUNCTION_MODELS = {
    "inspect": "inkling-small",
    "roundtrip": "inkling-small",
    "pd-eval": "inkling-small",
    "drift": None,
    "consistency": "llama-3.1-8b",
    "replay": None,
}


@pytest.mark.parametrize(("command", "option", "value"), _bounded_and_chosen())
def test_what_the_cli_refuses_the_api_refuses_as_bad_input(command: str, option: str, value: Any) -> None:
    function = getattr(api, command.replace("-", "_"))
    model = FUNCTION_MODELS[command]
    with pytest.raises(kvdoctor.KvdoctorError) as raised:
        function(*([model] if model else []), **{option: value})
    assert raised.value.exit_code == 2, raised.value
