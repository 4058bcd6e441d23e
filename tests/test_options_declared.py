"""Options declared once (``../shared/design/architecture.md`` 3.4; ``kvdoctor.core.declared``).

A command's options record is the only place its options are written down: the Typer command
(``kvdoctor.cli.typed_command``) and the keyword API (``kvdoctor.api._keywords``) are made from its fields, so
neither can name an option, a help text or a default the record does not. Held here:

1. no ``locals()`` gathers options anywhere in kvdoctor, and no option is read by a string key (``given["seed"]``,
   ``settings.get("inject")``) under ``cli/`` and ``api/``;
2. each declared command's click parameters are its record's options (spelling, help, default) plus only the
   options that choose how the result is shown, and its API function's arguments are the same options plus only
   the API's own;
3. every other command is in :data:`IN_FUNCTION`: its options reach no API function and no record, so their one
   declaration is the command function's signature (``faults``, ``schema`` and three benches).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
from pathlib import Path
from typing import Any

import pytest
import typer

import kvdoctor
import kvdoctor.api as api
from kvdoctor.api._consistency import consistency
from kvdoctor.api._drift import DriftArgs
from kvdoctor.api._inspect_args import InspectArgs
from kvdoctor.api._replay import ReplayArgs
from kvdoctor.api._roundtrip import RoundtripArgs
from kvdoctor.cli.app import BENCH_COMMANDS, COMMANDS, app
from kvdoctor.cli.bench_roundtrip import BenchRoundtripArgs
from kvdoctor.cli.typed_command import command, parsed, shown_option
from kvdoctor.consistency.prepared import ConsistencyOptions
from kvdoctor.core.declared import REQUIRED, argument, build, declared, group, option
from kvdoctor.engines import Engine
from kvdoctor.pd.options import PdEvalOptions
from kvdoctor.sweep.options import SweepOptions

PACKAGE = Path(kvdoctor.__file__).parent
ROOT = PACKAGE.parent

# command -> (its record, the options that only choose how its result is shown, the API's own keywords)
DECLARED: dict[str, tuple[type, set[str], set[str] | None]] = {
    "inspect": (InspectArgs, {"json_output"}, {"server_args"}),
    "roundtrip": (RoundtripArgs, {"json_output"}, {"server_args"}),
    "consistency": (ConsistencyOptions, {"json_out", "dry_run"}, {"server_args", "on_event"}),
    "pd-eval": (PdEvalOptions, {"json_out", "dry_run"}, {"server_args"}),
    "bench consistency": (ConsistencyOptions, {"json_out"}, None),  # a share of consistency's options, no API
    "bench replay": (ReplayArgs, {"json_out"}, None),  # a share of replay's
    "bench roundtrip": (BenchRoundtripArgs, {"json_output"}, None),  # roundtrip.options.BenchOptions as a group
    "drift": (DriftArgs, {"json_output"}, set()),
    "replay": (ReplayArgs, {"list_only", "json_out"}, {"on_event"}),
    "sweep": (SweepOptions, {"plan_only", "json_out", "junit_path", "html_path"}, None),  # the API takes the record
}
# Commands whose options are declared in the command function alone: no API function, no record.
IN_FUNCTION = {"faults", "schema", "bench pd-eval", "bench mxfp8", "bench startup"}
OPTION_NAMES = {"given", "settings", "options", "kwargs", "values"}  # what an option mapping is called


def click_command(name: str) -> Any:
    table = BENCH_COMMANDS if name.startswith("bench ") else COMMANDS
    lazy = next(c for c in table if c.name == name.removeprefix("bench "))
    return lazy.build(app.rich_markup_mode)


# ---- 1. the scanners ---------------------------------------------------------------------------------------------


def locals_calls(source: str) -> list[int]:
    return [
        n.lineno
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "locals"
    ]


def _option_mapping(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name in OPTION_NAMES


def string_key_lookups(source: str) -> list[int]:
    """Lines reading an option mapping by a string key: ``given["x"]``, ``self.settings["x"]``, ``given.get("x")``."""
    found = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Subscript) and _option_mapping(n.value):
            if isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
                found.append(n.lineno)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("get", "pop"):
            key = n.args[0] if n.args else None
            if _option_mapping(n.func.value) and isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.append(n.lineno)
    return found


def test_the_scanners_find_each_way_of_reading_an_option_by_name_and_nothing_else() -> None:
    source = (
        "def f(a, given, self):\n"
        "    given = dict(locals())\n"
        "    x = given['seed']\n"
        "    y = self.settings['inject']\n"
        "    z = given.get('junit_path')\n"
        "    w = given.pop('server_args')\n"
        "    ok = given[0], row['seed'], given.get(key), a.seed\n"
    )
    assert locals_calls(source) == [2]
    assert string_key_lookups(source) == [3, 4, 5, 6]


def test_no_locals_gathers_options_anywhere() -> None:
    found = [
        f"{p.relative_to(ROOT)}:{line}" for p in sorted(PACKAGE.rglob("*.py")) for line in locals_calls(p.read_text())
    ]
    assert not found, f"options gathered with locals(): declare them on the command's record instead: {found}"


def test_no_option_is_read_by_a_string_key_in_the_cli_or_the_api() -> None:
    found = [
        f"{p.relative_to(ROOT)}:{line}"
        for floor in ("cli", "api")
        for p in sorted((PACKAGE / floor).rglob("*.py"))
        for line in string_key_lookups(p.read_text())
    ]
    assert not found, f"an option read by a string key: read the record's field: {found}"


# ---- 2. each command and function made from its record ----------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    return value


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_the_command_is_its_records_options_plus_how_it_shows_the_result(name: str) -> None:
    cls, shown, _ = DECLARED[name]
    params = {p.name: p for p in click_command(name).params}
    mine = {d.keyword: d for d in declared(cls) if d.keyword in params}
    assert set(params) - set(mine) == shown, f"{name}: options that are neither the record's nor shown ones"
    if name == "bench consistency":
        assert len(mine) == 11  # the bench times SGLang's default run: no server, fault, scenario or report options
    elif name == "bench replay":
        assert set(mine) == {"bug", "every", "output_dir", "timeout"}  # the bench's JSON is its report
    else:
        assert set(mine) == {d.keyword for d in declared(cls)}
    for keyword, d in mine.items():
        p = params[keyword]
        assert tuple(p.opts) == (tuple(d.opt.flags[0].split("/")[:1]) if d.opt.flags else (keyword,)), keyword
        assert getattr(p, "help", None) in (d.opt.help, None), keyword
        if d.default is not REQUIRED:
            assert _plain(p.default) == _plain(d.default), keyword


@pytest.mark.parametrize("name", sorted(n for n, (_, _, own) in DECLARED.items() if own is not None))
def test_the_function_is_its_records_options_plus_the_apis_own(name: str) -> None:
    cls, _, own = DECLARED[name]
    function = getattr(api, name.replace("-", "_"))
    params = inspect.signature(function).parameters
    keywords = [d.keyword for d in declared(cls)]
    assert list(params)[: len(keywords)] == keywords
    assert set(list(params)[len(keywords) :]) == own
    for d in declared(cls):
        assert params[d.keyword].default == (inspect.Parameter.empty if d.default is REQUIRED else d.default)
        assert params[d.keyword].annotation == d.annotation  # what kvdoctor.api._arguments holds a caller to


def test_the_commands_declared_in_their_function_exist_and_have_no_api_function() -> None:
    for name in IN_FUNCTION:
        assert click_command(name) is not None
        assert name.replace("-", "_") not in api.__all__
    every = {c.name for c in COMMANDS} | {f"bench {c.name}" for c in BENCH_COMMANDS}
    assert every == set(DECLARED) | IN_FUNCTION, "a command that is neither declared by a record nor listed here"


# ---- 3. the declaration itself ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Inner:
    a: int = option(1, "--a", help="A.")
    b: int = option(2, "--b", help="B.")


_INNER = _Inner(a=10, b=20)


@dataclasses.dataclass(frozen=True)
class _Outer:
    name: str = argument(help="Name.")
    inner: _Inner = group(_Inner)
    tuned: _Inner = group(_Inner, _INNER)
    seconds: float = option(5.0, "--timeout", help="T.", keyword="timeout")
    hidden: int = 7


def test_a_group_lends_its_options_and_a_keyword_may_rename_its_field() -> None:
    # two groups of one class would declare a and b twice: a record may hold a group once
    with pytest.raises(TypeError, match="declares a keyword twice"):
        declared(_Outer)


@dataclasses.dataclass(frozen=True)
class _One:
    name: str = argument(help="Name.")
    tuned: _Inner = group(_Inner, _INNER)
    seconds: float = option(5.0, "--timeout", help="T.", keyword="timeout")
    hidden: int = 7


def test_build_fills_fields_by_keyword_groups_from_their_defaults_and_refuses_an_unknown_one() -> None:
    assert [(d.keyword, d.path, d.default) for d in declared(_One)] == [
        ("name", ("name",), REQUIRED),
        ("a", ("tuned", "a"), 10),
        ("b", ("tuned", "b"), 20),
        ("timeout", ("seconds",), 5.0),
    ]
    made = build(_One, {"name": "m", "b": 3, "timeout": 9.0}, hidden=8)
    assert made == _One("m", _Inner(10, 3), 9.0, 8)  # a: the group's default, not the class's
    assert build(_One, {"name": "m"}).tuned == _INNER
    with pytest.raises(TypeError, match="unknown option"):
        build(_One, {"name": "m", "seconds": 1.0})  # the field's name is not its keyword


def test_the_command_line_parses_a_choice_enum_where_the_api_takes_it_or_its_value() -> None:
    assert parsed(Engine | str) is Engine
    assert parsed(Engine | str | None) == Engine | None
    assert parsed(str | None) == str | None
    assert parsed(int) is int


def test_a_made_command_runs_its_body_with_the_record_and_the_shown_options() -> None:
    seen: list[Any] = []

    def body(ctx: typer.Context, record: _One, *, loud: bool) -> None:
        seen.append((record, loud))

    made = command(_One, body, name="one", doc="One.", shown=(shown_option("loud", "--loud", help="L."),), before="b")
    assert list(inspect.signature(made).parameters) == ["ctx", "name", "a", "loud", "b", "timeout"]
    runner_app = typer.Typer()
    runner_app.command()(made)
    from typer.testing import CliRunner

    out = CliRunner().invoke(runner_app, ["m", "--b", "4", "--loud", "--timeout", "2"])
    assert out.exit_code == 0, out.output
    assert seen == [(_One("m", _Inner(10, 4), 2.0), True)]


def test_the_api_refuses_a_wrong_type_by_the_records_annotation() -> None:
    with pytest.raises(TypeError, match="requests must be int"):
        consistency("lfm2-1.2b", requests="4")


# ---- the fault list: one encoder, one decoder (kvdoctor.engines.fault_list) ------------------------------------


def test_the_fault_list_is_written_and_read_by_its_encoder_and_decoder() -> None:
    from kvdoctor.engines.fault_list import decode, encode

    assert encode(["a", None, "b", "a", ""]) == "a,b"
    assert encode([]) is None
    assert decode(encode(["x", "y"])) == ("x", "y")
    assert decode(None) == decode("") == ()


def test_no_fault_list_is_joined_or_split_by_hand() -> None:
    by_hand = ('.split(",")', '",".join(', "','.join(", ".split(',')")
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "fault_list.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if any(h in line for h in by_hand) and ("inject" in line.lower() or "fault" in line.lower())
    ]
    assert not found, f"a fault list joined or split by hand: use kvdoctor.engines.fault_list: {found}"
