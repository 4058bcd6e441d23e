"""Exit codes are defined once (``kvdoctor/_exceptions.py``): the README's table, the error classes, the
signal codes and every command read that one table, and no other module spells a code of its own."""

from __future__ import annotations

import ast
import re
import signal
from pathlib import Path

import pytest

import kvdoctor
from kvdoctor import _exceptions
from kvdoctor._exceptions import (
    EXIT_CODES,
    EXIT_DEPLOYMENT,
    EXIT_GATE,
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_PASS,
    EXIT_SIGINT,
    EXIT_SIGPIPE,
    EXIT_SIGTERM,
    Interrupted,
    KvdoctorError,
)
from kvdoctor.cli import streams

PACKAGE = Path(kvdoctor.__file__).parent
README = PACKAGE.parent / "README.md"
TABLE_HOME = PACKAGE / "_exceptions.py"
_CODE_NAME = re.compile(r"(^EXIT_|_EXIT$|^exit_code$|^code$)")


def readme_codes() -> list[int]:
    """The first column of the README's "Exit codes" table."""
    section = README.read_text(encoding="utf-8").split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return [int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", section, flags=re.MULTILINE)]


def test_the_readme_table_lists_exactly_the_codes_of_the_one_table() -> None:
    assert readme_codes() == sorted(EXIT_CODES)


def test_the_signal_codes_are_128_plus_the_signal() -> None:
    assert (EXIT_SIGINT, EXIT_SIGPIPE, EXIT_SIGTERM) == (130, 141, 143)
    assert Interrupted.exit_code_for(signal.SIGINT) == EXIT_SIGINT
    assert Interrupted.exit_code_for(signal.SIGTERM) == EXIT_SIGTERM
    assert Interrupted.signal_of(EXIT_SIGTERM) == signal.SIGTERM
    assert Interrupted.signal_of(EXIT_INPUT) is None  # a code that no signal stands for


def _error_classes() -> list[type[KvdoctorError]]:
    found, todo = [], [KvdoctorError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


def test_every_error_class_exits_with_a_code_of_the_table() -> None:
    families = {
        _exceptions.GateFailure: EXIT_GATE,
        _exceptions.InputError: EXIT_INPUT,
        _exceptions.DeploymentError: EXIT_DEPLOYMENT,
        _exceptions.InternalError: EXIT_INTERNAL,
        streams.ReaderGone: EXIT_SIGPIPE,
    }
    assert {cls: cls.exit_code for cls in families} == families
    stray = {cls.__name__: cls.exit_code for cls in _error_classes() if cls.exit_code not in EXIT_CODES}
    assert stray == {}
    assert EXIT_PASS not in {cls.exit_code for cls in _error_classes()}  # no error ever exits 0


def offences(path: Path) -> list[str]:
    """Exit codes PATH spells itself: an int assigned to an ``EXIT_*``/``*_EXIT``/``exit_code`` name, a
    ``128 +``/``- 128`` signal formula, or a literal non-zero code handed to ``typer.Exit``/``SystemExit``/
    ``sys.exit``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            values += [branch for v in values if isinstance(v, ast.IfExp) for branch in (v.body, v.orelse)]
            literal = any(isinstance(v, ast.Constant) and type(v.value) is int for v in values)
            if literal and any(_CODE_NAME.search(n) for n in names):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            if any(isinstance(side, ast.Constant) and side.value == 128 for side in (node.left, node.right)):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if name in ("Exit", "SystemExit", "exit") and isinstance(first, ast.Constant) and first.value:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scanner_sees_each_way_of_spelling_a_code_by_hand(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "EXIT_DRIFT = 1\nexit_code = 3\ncode = 128 + signum\nraise typer.Exit(1)\nsys.exit(2)\n"
        "raise typer.Exit(0)\nmask = bits & 128\nexit_code = EXIT_GATE\nexit_code = 1 if failed else 0\ncode = 2\n",
        encoding="utf-8",
    )
    assert sorted(int(line.split(":")[0]) for line in offences(sample)) == [1, 2, 3, 4, 5, 9, 10]


# Modules that still spell a code by hand (another helper's files while this change landed): a strict
# xfail each, so the entry must go the moment the module imports the table instead.
PENDING: set[str] = set()


def _module(path: Path) -> object:
    name = path.relative_to(PACKAGE).as_posix()
    pending = pytest.mark.xfail(strict=True, reason="still spells an exit code itself: import it from _exceptions")
    return pytest.param(path, id=name, marks=[pending] if name in PENDING else [])


@pytest.mark.parametrize(
    "path",
    [  # repro/: a bundle's stand-alone files (stdlib only, no kvdoctor), whose codes their docstring lists
        _module(p)
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != TABLE_HOME and "_generated" not in p.parts and "repro" not in p.parts
    ],
)
def test_no_module_spells_an_exit_code_of_its_own(path: Path) -> None:
    assert offences(path) == []
