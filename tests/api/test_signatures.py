"""The public API and the CLI cannot drift apart: each function's keyword arguments are its command's options.

Read from the click command Typer builds (each option's Python name and default) and from the function's signature.
Only these differ, each for its reason: the options that choose how a terminal shows the result (``--json``,
``--dry-run``'s plan, ``--list``), and the API's own: ``server_args`` (what follows ``--`` on the command line) and
``on_event`` (progress, which the CLI prints).
"""

from __future__ import annotations

import enum
import inspect as pyinspect
from pathlib import Path
from typing import Any

import pytest

import kvdoctor.api as api
from kvdoctor.cli.app import COMMANDS, app

CLI_ONLY = {
    "inspect": {"json_output"},
    "roundtrip": {"json_output"},
    "consistency": {"json_out", "dry_run"},
    "pd-eval": {"json_out", "dry_run"},
    "drift": {"json_output"},
    "replay": {"json_out", "list_only"},
}
API_ONLY = {
    "inspect": {"server_args"},
    "roundtrip": {"server_args"},
    "consistency": {"server_args", "on_event"},
    "pd-eval": {"server_args"},
    "drift": set(),
    "replay": {"on_event"},
}
FUNCTIONS = {name: getattr(api, name.replace("-", "_")) for name in CLI_ONLY}


def _plain(value: Any) -> Any:
    """A default as both sides can state it: an enum by its value, a path as text, an empty list as None."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if value in ((), []):
        return None
    return value


def cli_options(command: str) -> dict[str, Any]:
    lazy = next(c for c in COMMANDS if c.name == command)
    click_command = lazy.build(app.rich_markup_mode)
    return {p.name: _plain(p.default) for p in click_command.params if p.name}


def api_options(command: str) -> dict[str, Any]:
    params = pyinspect.signature(FUNCTIONS[command]).parameters.values()
    return {p.name: _plain(p.default) if p.default is not p.empty else ... for p in params}


@pytest.mark.parametrize("command", sorted(CLI_ONLY))
def test_the_function_takes_the_commands_options_by_the_same_names(command: str) -> None:
    cli = set(cli_options(command)) - CLI_ONLY[command]
    function = set(api_options(command)) - API_ONLY[command]
    assert function == cli, f"only the CLI: {sorted(cli - function)}; only the API: {sorted(function - cli)}"


@pytest.mark.parametrize("command", sorted(CLI_ONLY))
def test_each_default_is_the_commands_default(command: str) -> None:
    cli, function = cli_options(command), api_options(command)
    differ = {k: (cli[k], function[k]) for k in set(cli) & set(function) if cli[k] != function[k] and k != "model"}
    assert not differ, differ


@pytest.mark.parametrize("command", sorted(CLI_ONLY))
def test_every_option_is_keyword_only_and_typed(command: str) -> None:
    params = list(pyinspect.signature(FUNCTIONS[command]).parameters.values())
    options = [p for p in params if p.name != "model"]
    assert all(p.kind is p.KEYWORD_ONLY for p in options), [p.name for p in options if p.kind is not p.KEYWORD_ONLY]
    assert all(p.annotation is not p.empty for p in params)
    assert pyinspect.signature(FUNCTIONS[command]).return_annotation == "Report"


def test_the_allowances_are_options_that_exist() -> None:
    """An allowance naming an option that is gone would hide the next difference: it must name a real one."""
    for command in CLI_ONLY:
        assert CLI_ONLY[command] <= set(cli_options(command)), command
        assert API_ONLY[command] <= set(api_options(command)), command


def test_the_public_names_resolve_and_nothing_else_is_exported() -> None:
    assert all(getattr(api, name) is not None for name in api.__all__)
    with pytest.raises(AttributeError):
        api.not_an_api_name  # noqa: B018
