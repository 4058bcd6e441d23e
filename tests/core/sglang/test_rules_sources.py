"""Every constant in ``kvdoctor/core/sglang/rules.py`` is read somewhere in kvdoctor.

A ``*_SOURCE`` citation nothing reads is a rule kvdoctor claims to restate but never shows or uses: it
must be attached to the datum it cites, carried by the hazard or condition that reports it, or named
where the rule is applied. A reference is the name as a word anywhere in ``kvdoctor/`` other than the
statement that defines it (another module reading ``rules.NAME``, a table in rules.py built from it, or
the comment at the use site that points at it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import kvdoctor
from kvdoctor.core.sglang import rules

PACKAGE = Path(kvdoctor.__file__).parent
RULES = Path(rules.__file__)


def _definitions(tree: ast.Module) -> dict[str, tuple[int, int]]:
    """Module-level names assigned in rules.py, each with the lines of its defining statement."""
    found: dict[str, tuple[int, int]] = {}
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            if isinstance(target, ast.Name):
                found[target.id] = (node.lineno, node.end_lineno or node.lineno)
    return found


def unreferenced(rules_text: str, others: list[str]) -> list[str]:
    """Public constants and ``*_SOURCE`` citations of RULES_TEXT that nothing outside their definitions names."""
    lines = rules_text.splitlines()
    missing = []
    for name, (start, end) in _definitions(ast.parse(rules_text)).items():
        if name.startswith("_") and not name.endswith("_SOURCE"):
            continue
        word = re.compile(rf"\b{re.escape(name)}\b")
        outside = "\n".join(lines[: start - 1] + lines[end:])
        if not word.search(outside) and not any(word.search(text) for text in others):
            missing.append(name)
    return missing


def _other_modules() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py") if p.resolve() != RULES.resolve()]


def test_every_rules_constant_is_referenced_in_kvdoctor() -> None:
    assert unreferenced(RULES.read_text(encoding="utf-8"), _other_modules()) == []


def test_the_check_finds_an_unread_citation() -> None:
    """The check itself: a citation named only by its definition is reported, one read by a table is not."""
    text = (
        'A_SOURCE = cite("x.py", "a", 1)\n'
        'B_SOURCE = cite("x.py", "b", 2)\n'
        "TABLE = {'b': B_SOURCE}\n"
        'MULTI_SOURCE = (\n    cite("x.py", "m", 3),\n)\n'
        "_PRIVATE = 1\n"
    )
    assert unreferenced(text, ["print(rules.TABLE)"]) == ["A_SOURCE", "MULTI_SOURCE"]
    assert unreferenced(text, ["rules.TABLE", "rules.A_SOURCE", "x = MULTI_SOURCE"]) == []


def test_every_citation_is_a_literal_cite_call_recorded_once() -> None:
    """The engine suite parses rules.py's cite(...) calls; each must be a literal call CITATIONS holds."""
    calls = [
        node
        for node in ast.walk(ast.parse(RULES.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "cite"
    ]
    assert len(calls) == len(rules.CITATIONS)
    assert all(all(isinstance(a, ast.Constant) for a in call.args) for call in calls)


def test_located_joins_where_of_each_citation() -> None:
    one = rules.Cite("srt/a.py", "a", 3, 5)
    two = rules.Cite("srt/b.py", "b", 7, 7)
    assert rules.located(one) == "sglang/srt/a.py:3-5"
    assert rules.located((one, two)) == "sglang/srt/a.py:3-5; sglang/srt/b.py:7"
