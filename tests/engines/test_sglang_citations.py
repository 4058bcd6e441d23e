"""Every citation in ``kvdoctor/core/sglang/rules/`` points at its symbol in the installed SGLang.

The rules package restates SGLang's rules and cites each one as ``cite(path, symbol, start, end)``. This
parses those calls out of its modules' source (so a citation cannot hide from the check), opens every
cited range in the installed SGLang's files, and checks the named symbol (a name, or a message
fragment) appears within the cited lines. It needs SGLang's files, not SGLang itself: nothing is
imported from it.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import cache
from pathlib import Path

import pytest

from kvdoctor.core.sglang import rules

pytestmark = pytest.mark.sglang

RULES_FILES = sorted(Path(rules.__file__).parent.glob("*.py"))
# A file:line written as prose rather than cited (``memory_pool.py:2010``) would escape the check.
PROSE_CITATION = re.compile(r"[\w/]+\.py:\d+")


def _parsed_citations() -> list[tuple[str, str, int, int]]:
    """(path, symbol, start, end) of every ``cite(...)`` call in the rules package, read from its syntax trees."""
    found = []
    nodes = (node for file in RULES_FILES for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))))
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "cite":
            args = [ast.literal_eval(a) for a in node.args]
            assert not node.keywords and 3 <= len(args) <= 4, f"line {node.lineno}: cite() takes literal arguments"
            path, symbol, start, *end = args
            found.append((path, symbol, start, end[0] if end else start))
    return found


CITED = _parsed_citations()


@cache
def _sglang_root() -> Path:
    spec = importlib.util.find_spec("sglang")  # locates the package without importing it
    assert spec is not None and spec.origin, "SGLang is not installed here"
    return Path(spec.origin).parent


@cache
def _lines(path: str) -> list[str]:
    file = _sglang_root() / path
    assert file.is_file(), f"{path}: no such file in the installed SGLang ({_sglang_root()})"
    return file.read_text(encoding="utf-8").splitlines()


def _named(symbol: str, text: str) -> bool:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", symbol):
        return re.search(rf"(?<![A-Za-z0-9_]){re.escape(symbol)}(?![A-Za-z0-9_])", text) is not None
    return symbol in text


def test_every_citation_is_parsed_and_registered() -> None:
    registered = [(c.path, c.symbol, c.start, c.end) for c in rules.CITATIONS]
    assert len(RULES_FILES) > 10 and CITED and sorted(CITED) == sorted(registered)


def test_rules_cite_only_through_cite() -> None:
    for file in RULES_FILES:
        prose = PROSE_CITATION.findall(file.read_text(encoding="utf-8"))
        assert prose == [], f"{file.name}: cite SGLang with cite(path, symbol, start, end), not prose"


@pytest.mark.parametrize(("path", "symbol", "start", "end"), CITED, ids=[f"{p}:{s}-{e}:{n}" for p, n, s, e in CITED])
def test_citation_names_its_symbol_in_the_installed_sglang(path: str, symbol: str, start: int, end: int) -> None:
    lines = _lines(path)
    assert 1 <= start <= end <= len(lines), f"{path}:{start}-{end} is outside the file ({len(lines)} lines)"
    text = "\n".join(lines[start - 1 : end])
    assert _named(symbol, text), f"{path}:{start}-{end} does not name {symbol!r}:\n{text}"
